// Tokenizer::create, encode, decode and the stream decoder. Loading from
// files is in tokenizer_load.cpp.
#include "engine/tokenizer.h"

#include <algorithm>
#include <array>
#include <functional>
#include <queue>

#include "engine/pre_tokenizer.h"
#include "engine/utf8.h"

namespace voltad {

namespace {

// GPT-2's byte <-> character mapping: printable Latin-1 bytes stand for
// themselves, the other 68 bytes take the characters from U+0100 on, in
// byte order. Token texts are written in these characters.
struct ByteAlphabet {
  std::array<std::string, 256> byte_to_text;
  std::array<int16_t, 324> char_to_byte;  // -1: not a byte character

  ByteAlphabet() {
    char_to_byte.fill(-1);
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      bool printable =
          (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      char32_t c = printable ? char32_t(b) : next++;
      utf8_append(byte_to_text[b], c);
      char_to_byte[c] = int16_t(b);
    }
  }
};

const ByteAlphabet& byte_alphabet() {
  static const ByteAlphabet alphabet;
  return alphabet;
}

struct MergeResult {
  int32_t rank;
  int32_t token;
};

// Open-addressing hash tables (linear probing, power-of-two size, at most
// half full). One contiguous array each builds and probes several times
// faster than std::unordered_map's node per entry at 150K entries, which is
// most of the load time of a large vocabulary.
size_t table_size_for(size_t entries) {
  size_t size = 16;
  while (size < entries * 2) size *= 2;
  return size;
}

// Token text -> the first id with that text. Texts are not copied: the
// index points into the token list, which must outlive it.
class TokenIndex {
 public:
  void build(const std::vector<std::string>& tokens) {
    tokens_ = &tokens;
    slots_.assign(table_size_for(tokens.size()), Slot{0, -1});
    for (size_t i = 0; i < tokens.size(); ++i) {
      uint64_t h = std::hash<std::string_view>{}(tokens[i]);
      size_t at = probe(tokens[i], h);
      if (slots_[at].id < 0) slots_[at] = Slot{uint32_t(h), int32_t(i)};
    }
  }
  int32_t find(std::string_view text) const {
    if (slots_.empty()) return -1;
    return slots_[probe(text, std::hash<std::string_view>{}(text))].id;
  }

 private:
  struct Slot {
    uint32_t hash;  // low bits of the full hash, compared before the text
    int32_t id;     // -1: empty
  };
  // The slot holding `text`, or the empty slot where it would go.
  size_t probe(std::string_view text, uint64_t h) const {
    const size_t mask = slots_.size() - 1;
    for (size_t at = size_t(h) & mask;; at = (at + 1) & mask) {
      const Slot& slot = slots_[at];
      if (slot.id < 0 || (slot.hash == uint32_t(h) && (*tokens_)[size_t(slot.id)] == text))
        return at;
    }
  }
  const std::vector<std::string>* tokens_ = nullptr;
  std::vector<Slot> slots_;
};

// (left id, right id) -> the merge; the first insertion of a pair wins.
class MergeIndex {
 public:
  void reserve(size_t entries) { slots_.assign(table_size_for(entries), Slot{kEmpty, {}}); }
  void insert(uint64_t key, MergeResult merge) {
    size_t at = probe(key);
    if (slots_[at].key == kEmpty) slots_[at] = Slot{key, merge};
  }
  const MergeResult* find(uint64_t key) const {
    if (slots_.empty()) return nullptr;
    const Slot& slot = slots_[probe(key)];
    return slot.key == kEmpty ? nullptr : &slot.merge;
  }

 private:
  static constexpr uint64_t kEmpty = ~uint64_t(0);  // ids are never negative in a key
  struct Slot {
    uint64_t key;
    MergeResult merge;
  };
  size_t probe(uint64_t key) const {
    const size_t mask = slots_.size() - 1;
    uint64_t h = key * 0x9E3779B97F4A7C15ull;  // Fibonacci hashing spreads the id pairs
    for (size_t at = size_t(h >> 20) & mask;; at = (at + 1) & mask)
      if (slots_[at].key == key || slots_[at].key == kEmpty) return at;
  }
  std::vector<Slot> slots_;
};

uint64_t pair_key(int32_t left, int32_t right) {
  return (uint64_t(uint32_t(left)) << 32) | uint32_t(right);
}

bool is_special_type(TokenType t) {
  return t == TokenType::Control || t == TokenType::UserDefined;
}

}  // namespace

std::string byte_level_encode(std::string_view bytes) {
  const ByteAlphabet& alphabet = byte_alphabet();
  std::string text;
  text.reserve(bytes.size() * 2);
  for (char c : bytes) text += alphabet.byte_to_text[uint8_t(c)];
  return text;
}

struct Tokenizer::Impl {
  TokenizerData data;
  PreTokenizer pre = PreTokenizer::Gpt2;
  std::vector<TokenType> types;
  TokenIndex ids;                         // token text -> first id (points into data.tokens)
  MergeIndex merges;                      // (left, right) -> merge
  std::array<int32_t, 256> byte_token{};  // byte -> its symbol's id, -1 if the vocabulary lacks it
  std::vector<std::string> pieces;        // id -> bytes
  // Control and user-defined tokens by first byte, longest first.
  std::array<std::vector<int32_t>, 256> specials_by_first_byte;
  std::vector<bool> end_of_generation;

  void encode_text(std::string_view text, std::vector<int32_t>& out) const;
  void encode_piece(std::string_view piece, std::vector<int32_t>& out) const;
};

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Result<Tokenizer> Tokenizer::create(TokenizerData data_in) {
  auto impl = std::make_unique<Impl>();
  impl->data = std::move(data_in);
  const TokenizerData& data = impl->data;
  if (data.model != "gpt2")
    return make_error(
        "tokenizer model \"" + data.model +
        "\" is not supported: voltad implements byte-level BPE (tokenizer.ggml.model = gpt2), "
        "as Llama 3, Qwen2/3 and SmolLM2 use");
  auto pre = pre_tokenizer_from_name(data.pre);
  if (!pre) return pre.error();
  impl->pre = pre.value();

  const size_t n = data.tokens.size();
  if (n == 0) return make_error("the tokenizer has no tokens");
  if (n > size_t(INT32_MAX)) return make_error("the tokenizer has too many tokens");
  if (!data.token_types.empty() && data.token_types.size() != n)
    return make_error("the tokenizer has " + std::to_string(n) + " tokens but " +
                      std::to_string(data.token_types.size()) +
                      " token types; the file is inconsistent");
  for (auto [name, id] : {std::pair{"bos", data.bos_id}, std::pair{"eos", data.eos_id},
                          std::pair{"eot", data.eot_id}, std::pair{"padding", data.pad_id}}) {
    if (id < -1 || id >= int64_t(n))
      return make_error(std::string(name) + " token id " + std::to_string(id) +
                        " is outside the vocabulary of " + std::to_string(n) + " tokens");
  }

  const ByteAlphabet& alphabet = byte_alphabet();
  impl->types.resize(n, TokenType::Normal);
  impl->pieces.resize(n);
  impl->ids.build(data.tokens);
  for (size_t i = 0; i < n; ++i) {
    if (!data.token_types.empty()) {
      int32_t t = data.token_types[i];
      impl->types[i] = (t >= 0 && t <= 6) ? TokenType(t) : TokenType::Undefined;
    }
    const std::string& text = data.tokens[i];
    if (is_special_type(impl->types[i])) {
      impl->pieces[i] = text;  // added tokens are stored as plain text
      if (!text.empty()) impl->specials_by_first_byte[uint8_t(text[0])].push_back(int32_t(i));
      continue;
    }
    // Byte-level text back to bytes; a character outside the alphabet
    // (not seen in real vocabularies) stands for itself.
    std::string& bytes = impl->pieces[i];
    for (size_t k = 0; k < text.size();) {
      Utf8Char c = utf8_decode(text, k);
      if (c.valid && c.cp < alphabet.char_to_byte.size() && alphabet.char_to_byte[c.cp] >= 0) {
        bytes.push_back(char(alphabet.char_to_byte[c.cp]));
      } else {
        bytes.append(text, k, c.length);
      }
      k += c.length;
    }
  }
  for (auto& list : impl->specials_by_first_byte) {
    std::stable_sort(list.begin(), list.end(), [&](int32_t a, int32_t b) {
      return data.tokens[a].size() > data.tokens[b].size();
    });
  }
  // A byte whose symbol the vocabulary lacks is dropped from the text, as
  // Hugging Face's BPE drops unknown characters when there is no unk token
  // (SmolLM2 has no symbol for 21 bytes, e.g. 0x04 and 0xFF).
  int present = 0;
  for (int b = 0; b < 256; ++b) {
    impl->byte_token[b] = impl->ids.find(alphabet.byte_to_text[b]);
    present += impl->byte_token[b] >= 0;
  }
  if (present < 128)
    return make_error("the vocabulary has symbols for only " + std::to_string(present) +
                      " of the 256 bytes; it is not a GPT-2 style byte-level vocabulary");

  impl->merges.reserve(data.merges.size());
  std::string joined;
  for (size_t r = 0; r < data.merges.size(); ++r) {
    const std::string& m = data.merges[r];
    size_t space = m.find(' ', 1);
    auto bad = [&](const std::string& why) {
      return make_error("merge " + std::to_string(r) + " \"" + utf8_sanitize(m.substr(0, 80)) +
                        "\" " + why + "; the tokenizer's merges are corrupt");
    };
    if (space == std::string::npos || space + 1 >= m.size())
      return bad("is not two tokens separated by a space");
    std::string_view left(m.data(), space), right(m.data() + space + 1, m.size() - space - 1);
    int32_t l = impl->ids.find(left), rt = impl->ids.find(right);
    if (l < 0 || rt < 0) return bad("names a token that is not in the vocabulary");
    joined.assign(left);
    joined.append(right);
    int32_t merged = impl->ids.find(joined);
    if (merged < 0) return bad("makes a token that is not in the vocabulary");
    // The first (highest priority) occurrence of a pair wins.
    impl->merges.insert(pair_key(l, rt), MergeResult{int32_t(r), merged});
  }

  impl->end_of_generation.assign(n, false);
  for (int32_t id : {data.eos_id, data.eot_id})
    if (id >= 0) impl->end_of_generation[size_t(id)] = true;
  for (const char* name :
       {"<|eot_id|>", "<|eom_id|>", "<|im_end|>", "<|end_of_text|>", "<|endoftext|>"}) {
    if (int32_t id = impl->ids.find(name); id >= 0) impl->end_of_generation[size_t(id)] = true;
  }

  return Tokenizer(std::move(impl));
}

void Tokenizer::Impl::encode_piece(std::string_view piece, std::vector<int32_t>& out) const {
  if (piece.size() == 1) {
    if (int32_t id = byte_token[uint8_t(piece[0])]; id >= 0) out.push_back(id);
    return;
  }
  if (data.ignore_merges) {
    int32_t id = ids.find(byte_level_encode(piece));
    if (id >= 0 && !is_special_type(types[size_t(id)])) {
      out.push_back(id);
      return;
    }
  }

  // Symbols form a linked list over the piece's bytes; a candidate merge
  // names its left symbol and the ids it expects, and is dropped when popped
  // if either side has changed since. Lowest rank first, then leftmost.
  struct Symbol {
    int32_t id;
    int32_t prev, next;  // -1 at the ends
  };
  struct Candidate {
    int32_t rank, left, left_id, right_id;
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : left > o.left;
    }
  };
  std::vector<Symbol> symbols;
  symbols.reserve(piece.size());
  for (char c : piece) {
    int32_t id = byte_token[uint8_t(c)];
    if (id < 0) continue;  // no symbol for this byte: dropped
    auto i = int32_t(symbols.size());
    symbols.push_back({id, i - 1, -1});
    if (i > 0) symbols[size_t(i - 1)].next = i;
  }
  if (symbols.empty()) return;
  const auto count = int32_t(symbols.size());

  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue;
  auto consider = [&](int32_t left) {
    if (left < 0) return;
    int32_t right = symbols[size_t(left)].next;
    if (right < 0) return;
    int32_t a = symbols[size_t(left)].id, b = symbols[size_t(right)].id;
    if (const MergeResult* m = merges.find(pair_key(a, b))) queue.push({m->rank, left, a, b});
  };
  for (int32_t i = 0; i + 1 < count; ++i) consider(i);

  while (!queue.empty()) {
    Candidate c = queue.top();
    queue.pop();
    Symbol& left = symbols[size_t(c.left)];
    if (left.id != c.left_id || left.next < 0) continue;
    Symbol& right = symbols[size_t(left.next)];
    if (right.id != c.right_id) continue;
    left.id = merges.find(pair_key(c.left_id, c.right_id))->token;
    right.id = -1;
    left.next = right.next;
    if (left.next >= 0) symbols[size_t(left.next)].prev = c.left;
    consider(left.prev);
    consider(c.left);
  }
  for (int32_t i = 0; i >= 0; i = symbols[size_t(i)].next) out.push_back(symbols[size_t(i)].id);
}

void Tokenizer::Impl::encode_text(std::string_view text, std::vector<int32_t>& out) const {
  if (text.empty()) return;
  std::string normalized;
  if (data.normalize_nfc) {
    normalized = nfc_normalize(text);
    text = normalized;
  }
  std::vector<std::string_view> pieces;
  pre_tokenize(pre, text, pieces);
  for (std::string_view piece : pieces) encode_piece(piece, out);
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_bos,
                                       bool parse_special) const {
  if (!parse_special) {
    const TextRange all{0, text.size()};
    return encode(text, add_bos, std::span<const TextRange>(&all, 1));
  }
  return encode(text, add_bos, std::span<const TextRange>());
}

std::vector<int32_t> Tokenizer::encode_raw_prompt(std::string_view text) const {
  std::vector<int32_t> out = encode(text, false, true);
  const int32_t bos = impl_->data.bos_id;
  if (impl_->data.add_bos && bos >= 0 && (out.empty() || out[0] != bos))
    out.insert(out.begin(), bos);
  return out;
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_bos,
                                       std::span<const TextRange> literal) const {
  const Impl& m = *impl_;
  // Whether [pos, pos + n) overlaps a literal range.
  auto in_literal = [&](size_t pos, size_t n) {
    for (const TextRange& r : literal)
      if (pos < r.end && r.begin < pos + n) return true;
    return false;
  };
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 2);
  if (add_bos && m.data.bos_id >= 0) out.push_back(m.data.bos_id);

  // Split out special tokens: at each position the longest one that fits
  // (candidates are sorted longest first), leftmost position first.
  size_t segment = 0;
  for (size_t pos = 0; pos < text.size();) {
    int32_t found = -1;
    for (int32_t id : m.specials_by_first_byte[uint8_t(text[pos])]) {
      const std::string& piece = m.data.tokens[size_t(id)];
      if (m.types[size_t(id)] == TokenType::Control && in_literal(pos, piece.size())) continue;
      if (text.substr(pos).starts_with(piece)) {
        found = id;
        break;
      }
    }
    if (found < 0) {
      ++pos;
      continue;
    }
    m.encode_text(text.substr(segment, pos - segment), out);
    out.push_back(found);
    pos += m.data.tokens[size_t(found)].size();
    segment = pos;
  }
  m.encode_text(text.substr(segment), out);
  return out;
}

std::string Tokenizer::decode(std::span<const int32_t> tokens) const {
  std::string out;
  for (int32_t t : tokens)
    if (t >= 0 && size_t(t) < impl_->pieces.size()) out += impl_->pieces[size_t(t)];
  return out;
}

std::string Tokenizer::token_piece(int32_t token) const {
  if (token < 0 || size_t(token) >= impl_->pieces.size()) return {};
  return impl_->pieces[size_t(token)];
}

int32_t Tokenizer::bos() const {
  return impl_->data.bos_id;
}
int32_t Tokenizer::eos() const {
  return impl_->data.eos_id;
}

bool Tokenizer::is_marker(int32_t token) const {
  return token_type(token) == TokenType::Control || is_end_of_generation(token);
}

bool Tokenizer::is_end_of_generation(int32_t token) const {
  return token >= 0 && size_t(token) < impl_->end_of_generation.size() &&
         impl_->end_of_generation[size_t(token)];
}

size_t Tokenizer::vocab_size() const {
  return impl_->data.tokens.size();
}

std::optional<int32_t> Tokenizer::find_token(std::string_view text) const {
  int32_t id = impl_->ids.find(text);
  if (id < 0) return std::nullopt;
  return id;
}

TokenType Tokenizer::token_type(int32_t token) const {
  if (token < 0 || size_t(token) >= impl_->types.size()) return TokenType::Undefined;
  return impl_->types[size_t(token)];
}

const TokenizerData& Tokenizer::data() const {
  return impl_->data;
}

StreamDecoder::StreamDecoder(const Tokenizer& tokenizer) : tokenizer_(&tokenizer) {}

std::string StreamDecoder::push(int32_t token) {
  // A control token is markup, not text: a generation that runs on past
  // its end (ignore_eos) or opens a turn does not show <|eot_id|> or
  // <|im_start|>. User-defined tokens (<think>) are text.
  const size_t held = pending_.size();
  if (!tokenizer_->is_marker(token)) pending_ += tokenizer_->token_piece(token);
  size_t keep = utf8_incomplete_tail(pending_);
  std::string out = utf8_sanitize(std::string_view(pending_).substr(0, pending_.size() - keep));
  owed_ = 0;
  if (held > 0 && pending_.size() - keep > 0) {
    // The held bytes start one character (utf8_incomplete_tail kept them
    // whole): this token either finished it, or they become U+FFFD.
    const Utf8Char first = utf8_decode(pending_, 0);
    if (!(first.valid && first.length > held))
      owed_ = utf8_sanitize(std::string_view(pending_).substr(0, held)).size();
  }
  pending_.erase(0, pending_.size() - keep);
  return out;
}

std::string StreamDecoder::flush() {
  std::string out = utf8_sanitize(pending_);
  owed_ = out.size();
  pending_.clear();
  return out;
}

}  // namespace voltad
