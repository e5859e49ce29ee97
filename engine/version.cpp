// The engine library needs at least one translation unit from the start.
namespace voltad {
const char* engine_name() { return "voltad-engine"; }
}  // namespace voltad
