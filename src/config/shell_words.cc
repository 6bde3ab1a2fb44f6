// The shell words of a launch script (shell_words.h): what config/megatron_args.cc and
// serve/vllm_command.cc read. It is not a shell.
#include "config/shell_words.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdint>
#include <optional>

namespace actmem::shell {

namespace {

std::optional<int64_t> arithmetic(std::string_view expr) {  // integers with + - * /, left to right
  int64_t result = 0;
  char op = '+';
  std::size_t i = 0;
  while (i < expr.size()) {
    while (i < expr.size() && expr[i] == ' ') ++i;
    int64_t v = 0;
    auto [end, ec] = std::from_chars(expr.data() + i, expr.data() + expr.size(), v);
    if (ec != std::errc{}) return std::nullopt;
    i = static_cast<std::size_t>(end - expr.data());
    bool overflow = false;  // a script's arithmetic is not trusted to fit
    if (op == '+') overflow = __builtin_add_overflow(result, v, &result);
    else if (op == '-') overflow = __builtin_sub_overflow(result, v, &result);
    else if (op == '*') overflow = __builtin_mul_overflow(result, v, &result);
    else if (op == '/' && v != 0 && !(result == INT64_MIN && v == -1)) result /= v;
    else return std::nullopt;
    if (overflow) return std::nullopt;
    while (i < expr.size() && expr[i] == ' ') ++i;
    if (i < expr.size()) op = expr[i++];
  }
  return result;
}

}  // namespace

std::vector<std::vector<Token>> tokenize(std::string_view text) {
  std::vector<std::vector<Token>> lines(1);
  std::string cur;
  bool in_token = false;
  char quote = 0;
  int line = 1;
  int token_line = 1;
  auto flush = [&] {
    if (in_token) lines.back().push_back({cur, token_line});
    cur.clear();
    in_token = false;
  };
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (quote) {
      if (c == quote) {
        quote = 0;
      } else {
        if (c == '\n') ++line;
        cur += c;
      }
      continue;
    }
    if (c == '\\' && i + 1 < text.size() && text[i + 1] == '\n') {  // continuation
      flush();
      ++i;
      ++line;
      continue;
    }
    if (c == '\n') {
      flush();
      lines.emplace_back();
      ++line;
      continue;
    }
    if (c == '#' && !in_token) {  // a comment to the end of the line
      while (i + 1 < text.size() && text[i + 1] != '\n') ++i;
      continue;
    }
    if (std::isspace(static_cast<unsigned char>(c))) {
      flush();
      continue;
    }
    if (!in_token) token_line = line;
    in_token = true;
    if (c == '"' || c == '\'') {
      quote = c;
      continue;
    }
    cur += c;
  }
  flush();
  return lines;
}

bool is_name(std::string_view s) {
  if (s.empty() || !(std::isalpha(static_cast<unsigned char>(s[0])) || s[0] == '_')) return false;
  return std::all_of(s.begin(), s.end(), [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; });
}

std::vector<Token> expand(const Token& word, const Vars& vars) {
  const std::string& token = word.text;
  // A token that is exactly one array reference splices the array.
  for (const std::string& form : {std::string("${"), std::string("$")}) {
    if (token.rfind(form, 0) != 0) continue;
    std::string name = token.substr(form.size());
    if (form == "${") {
      if (name.empty() || name.back() != '}') continue;
      name.pop_back();
      if (name.ends_with("[@]") || name.ends_with("[*]")) name.resize(name.size() - 3);
    }
    if (auto it = vars.find(name); it != vars.end() && is_name(name)) return it->second;
  }
  std::string out;
  for (std::size_t i = 0; i < token.size(); ++i) {
    if (token[i] != '$') {
      out += token[i];
      continue;
    }
    if (token.compare(i, 3, "$((") == 0) {
      const auto close = token.find("))", i);
      if (close != std::string::npos) {
        std::string inner;
        for (const auto& part : expand({token.substr(i + 3, close - i - 3), word.line}, vars)) inner += part.text;
        if (auto v = arithmetic(inner)) {
          out += std::to_string(*v);
          i = close + 1;
          continue;
        }
      }
    }
    std::size_t j = i + 1;
    std::string name;
    if (j < token.size() && token[j] == '{') {
      const auto close = token.find('}', j);
      if (close == std::string::npos) {
        out += token[i];
        continue;
      }
      name = token.substr(j + 1, close - j - 1);
      j = close + 1;
    } else {
      while (j < token.size() && (std::isalnum(static_cast<unsigned char>(token[j])) || token[j] == '_')) name += token[j++];
    }
    auto it = vars.find(name);
    if (it == vars.end() || it->second.empty()) {
      out += token.substr(i, j - i);
    } else {
      out += it->second.front().text;
    }
    i = j - 1;
  }
  return {{out, word.line}};
}

}  // namespace actmem::shell
