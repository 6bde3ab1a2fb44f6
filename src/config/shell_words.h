// The words of a shell script as the launch-line readers need them (config/megatron_args.cc for
// Megatron-LM scripts, serve/vllm_command.cc for `vllm serve` lines): line continuations joined,
// comments dropped, quotes removed, and $VAR, ${VAR}, ${VAR[@]} and $((a*b)) expanded from the
// script's own variables. It is not a shell: no globbing, no command substitution, no functions.
//
//   auto lines = shell::tokenize("A=2\nrun --x $A \\\n  --y 3\n");
//   // lines[1]: run, --x, $A, --y, 3 (each with its line: 2, 2, 2, 3, 3)
//   shell::expand(lines[1][2], {{"A", {{"2", 1}}}})  // {{"2", 2}}
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace actmem::shell {

/// One word of the script and the line it was written on (1-based).
struct Token {
  std::string text;
  int line = 0;
  std::string file;  // where the word was read when not the command's own file (a --config YAML)
};

/// Lines of words: backslash-newline continuations joined into one line, `#` comments (at the start
/// of a word) dropped, '...' and "..." quotes removed (a quoted newline stays in its word).
std::vector<std::vector<Token>> tokenize(std::string_view text);

/// A shell variable name: a letter or '_', then letters, digits or '_'. Example: is_name("TP_SIZE").
bool is_name(std::string_view s);

/// The script's variables: scalars and arrays (a scalar is a one-element array), each word with the
/// line it was written on, so a word spliced from an array names its own line.
using Vars = std::map<std::string, std::vector<Token>>;

/// $VAR, ${VAR}, ${VAR[@]} and $((...)) (integers, + - * / left to right) inside one word; a word
/// that is exactly one array reference splices the array. Unknown variables stay as written.
std::vector<Token> expand(const Token& word, const Vars& vars);

}  // namespace actmem::shell
