"""The official OpenAI Python SDK, unchanged, over voltad's Unix socket
(through httpx2's Unix-socket transport, the HTTP client the SDK is built
on): chat and text completions, streamed and not, and its error classes.
usage: serve_openai_sdk.py SOCKET"""
import sys

import httpx2
import openai

SOCK = sys.argv[1]
client = openai.OpenAI(base_url="http://localhost/v1", api_key="unused", max_retries=0,
                       http_client=httpx2.Client(transport=httpx2.HTTPTransport(uds=SOCK)))
failures = 0


def check(what, cond, detail=""):
    global failures
    print(f"{'ok  ' if cond else 'FAIL'} {what}{'' if cond else ': ' + str(detail)}")
    failures += not cond


models = client.models.list()
model = models.data[0].id
check("models.list", model.startswith("SmolLM2"), models)

r = client.chat.completions.create(model=model, messages=[{"role": "user", "content": "What is the capital of France?"}],
                                   max_tokens=6, temperature=0)
check("chat.completions: a message with content", r.choices[0].message.role == "assistant" and r.choices[0].message.content,
      r)
check("chat.completions: usage adds up", r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens, r.usage)

stream = client.chat.completions.create(model=model, messages=[{"role": "user", "content": "Say hello"}], max_tokens=5,
                                        stream=True, stream_options={"include_usage": True}, seed=1)
chunks = list(stream)
text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
usage = [c.usage for c in chunks if c.usage]
check("chat stream: first delta has the role", chunks[0].choices[0].delta.role == "assistant", chunks[0])
check("chat stream: text, one finish_reason, usage at the end", text and finish in (["stop"], ["length"]) and
      len(usage) == 1 and usage[0].completion_tokens <= 5, (text, finish, usage))

stream = client.chat.completions.create(model=model, messages=[{"role": "user", "content": "Count to three"}],
                                        max_tokens=3, stream=True)
chunks = list(stream)
check("chat stream without include_usage: usage rides on the final chunk", chunks[-1].usage is not None and
      chunks[-1].choices[0].finish_reason is not None, chunks[-1])

r = client.completions.create(model=model, prompt="Once upon a time", max_tokens=4, temperature=0,
                              extra_body={"ignore_eos": True})
check("completions: 4 tokens of text", r.choices[0].text and r.usage.completion_tokens == 4 and
      r.choices[0].finish_reason == "length", r)
parts = list(client.completions.create(model=model, prompt="The sky is", max_tokens=4, stream=True,
                                       extra_body={"top_k": 20, "min_p": 0.05, "ignore_eos": True}))
check("completions stream: text chunks then a finish", any(p.choices[0].text for p in parts) and
      parts[-1].choices[0].finish_reason == "length", parts[-1])

# Log-probabilities, as the SDK parses them: one entry a token of the answer,
# whose bytes make its text; greedy chooses the likeliest of the top ones.
# Long enough to end at the end-of-sequence token, which is not listed (nor
# counted in usage).
r = client.chat.completions.create(model=model, messages=[{"role": "user", "content": "What is 2 + 2?"}],
                                   max_tokens=60, temperature=0, logprobs=True, top_logprobs=3)
content = r.choices[0].logprobs.content
check("chat logprobs: one entry a token, their bytes the answer's text",
      len(content) == r.usage.completion_tokens and r.choices[0].finish_reason == "stop" and
      bytes(b for c in content for b in c.bytes).decode() == r.choices[0].message.content, (content, r))
check("chat logprobs: three alternatives each, the chosen one the likeliest (greedy)",
      all(len(c.top_logprobs) == 3 and c.token == c.top_logprobs[0].token and c.logprob <= 0 and
          c.top_logprobs[0].logprob >= c.top_logprobs[2].logprob for c in content), content)
chunks = list(client.chat.completions.create(model=model, messages=[{"role": "user", "content": "What is 2 + 2?"}],
                                             max_tokens=60, temperature=0, logprobs=True, stream=True))
streamed = [c for ch in chunks if ch.choices and ch.choices[0].logprobs for c in ch.choices[0].logprobs.content]
check("chat stream logprobs: the same tokens, chunk by chunk",
      [c.token for c in streamed] == [c.token for c in content], (streamed, content))
r = client.completions.create(model=model, prompt="Le café près de la gare", max_tokens=8, temperature=0.9, seed=3,
                              logprobs=2, extra_body={"ignore_eos": True})
lp = r.choices[0].logprobs
text = r.choices[0].text
# Offsets count characters (as Python's str does), and each token's text is
# there; each dict holds the 2 likeliest and the chosen token, likeliest first.
check("completions logprobs: tokens, their log-probabilities, offsets into the text (characters)",
      len(lp.tokens) == 8 and "".join(lp.tokens) == text and len(lp.token_logprobs) == 8 and
      lp.text_offset == [len("".join(lp.tokens[:i])) for i in range(8)] and
      all(text[o:].startswith(t) for o, t in zip(lp.text_offset, lp.tokens)), lp)
check("completions top_logprobs: 2 alternatives and the chosen token, likeliest first",
      all(tok in d and 2 <= len(d) <= 3 and list(d.values()) == sorted(d.values(), reverse=True)
          for tok, d in zip(lp.tokens, lp.top_logprobs)), lp)

try:
    client.chat.completions.create(model="no-such-model", messages=[{"role": "user", "content": "x"}], max_tokens=2)
    check("unknown model raises NotFoundError", False)
except openai.NotFoundError as e:
    check("unknown model raises NotFoundError", e.status_code == 404 and "no-such-model" in str(e))
try:
    client.chat.completions.create(model=model, messages=[{"role": "user", "content": "x"}], max_tokens=2,
                                   temperature=50000)
    check("bad temperature raises BadRequestError", False)
except openai.BadRequestError as e:
    check("bad temperature raises BadRequestError naming it", e.status_code == 400 and "temperature" in str(e), e)
sys.exit(1 if failures else 0)
