#include "table_flags.h"

#include <algorithm>  // std::find_if

#include <fmt/format.h>
#include <fmt/ranges.h>  // fmt::join

#include "cli.h"  // flag_of

namespace actmem::cli {

namespace {

/// `text` broken into lines of at most `width` columns at spaces, joined by '\n' (CLI11 indents
/// each continuation line under the description column; it does not wrap by itself).
std::string wrap(const std::string& text, std::size_t width) {
  std::string out, line;
  std::size_t start = 0;
  while (start <= text.size()) {
    std::size_t end = text.find(' ', start);
    if (end == std::string::npos) end = text.size();
    const std::string word = text.substr(start, end - start);
    if (!line.empty() && line.size() + 1 + word.size() > width) {
      out += line + "\n";
      line.clear();
    }
    line += (line.empty() ? "" : " ") + word;
    start = end + 1;
  }
  return out + line;
}

/// CLI11's help layout: a 30-column first column (its default), descriptions after it, in the 100
/// columns tests/check_help_width.py holds every help screen to.
constexpr std::size_t kHelpColumn = 30;
constexpr std::size_t kHelpDescriptionWidth = 100 - kHelpColumn;

const char* type_name(OptionKind kind) {
  switch (kind) {
    case OptionKind::kCount: return "INT";
    case OptionKind::kReal: return "FLOAT";
    case OptionKind::kSize: return "SIZE";
    default: return "TEXT";
  }
}

/// The option given more often than it may be, or nullptr: in `app` or the subcommand parsed.
const CLI::Option* repeated_option(const CLI::App& app) {
  for (const CLI::Option* o : app.get_options()) {
    if (o->get_multi_option_policy() != CLI::MultiOptionPolicy::Throw) continue;
    const auto most = static_cast<std::size_t>(std::max(o->get_items_expected_max(), 1));
    if (o->results().size() > most) return o;
  }
  for (const CLI::App* sub : app.get_subcommands())
    if (const CLI::Option* o = repeated_option(*sub)) return o;
  return nullptr;
}

}  // namespace

OptionValue TableFlag::value() const {
  return spec->kind == OptionKind::kFlag ? OptionValue{on} : option_value_from_text(spec->kind, text);
}

std::string flag_help(const OptionSpec& spec) {
  const auto spell = [](const std::string& field) { return flag_of(field); };
  std::string help = render_message(std::string(spec.help), spell);
  if (const std::string choices = option_choices(spec); !choices.empty()) help += ": " + choices;
  if (!spec.default_note.empty()) help += " (default: " + render_message(std::string(spec.default_note), spell) + ")";
  return wrap(help, kHelpDescriptionWidth);
}

void add_table_flags(CLI::App* cmd, TableFlags& t, std::optional<OptionScope> only, const TrainingSettings& defaults) {
  std::vector<const OptionSpec*> specs;
  for (const OptionSpec& spec : training_options())
    if (!only || spec.scope == *only) specs.push_back(&spec);
  t.flags.assign(specs.size(), TableFlag{});
  for (std::size_t i = 0; i < specs.size(); ++i) {
    TableFlag& f = t.flags[i];
    f.spec = specs[i];
    const std::string flag = flag_of(std::string(f.spec->name));
    CLI::Option* o = nullptr;
    if (f.spec->kind == OptionKind::kFlag) {
      o = cmd->add_flag(flag, f.on, flag_help(*f.spec))->multi_option_policy(CLI::MultiOptionPolicy::Throw);
    } else {
      o = cmd->add_option(flag, f.text, flag_help(*f.spec))->type_name(type_name(f.spec->kind));
      if (f.spec->default_note.empty()) o->default_str(option_default_text(*f.spec, defaults));
    }
    o->group(std::string(option_group_name(f.spec->group)));
    f.option = o;
  }
}

void add_info_flags(CLI::App* cmd, std::span<const OptionInfo> infos, SetByName set,
                    std::string (*shown)(std::string_view name)) {
  const auto spell = [](const std::string& field) { return flag_of(field); };
  for (const OptionInfo& info : infos) {
    const std::string flag = flag_of(std::string(info.name));
    const std::string help = wrap(render_message(std::string(info.help), spell), kHelpDescriptionWidth);
    const auto apply = [set, &info, spell](const OptionValue& v) {
      if (auto ok = set(info.name, v); !ok) throw CLI::ValidationError(render_message(ok.error().message, spell));
    };
    if (info.kind == OptionKind::kFlag) {
      cmd->add_flag_function(flag, [apply](int64_t) { apply(OptionValue{true}); }, help)
          ->multi_option_policy(CLI::MultiOptionPolicy::Throw);
      continue;
    }
    auto* o = cmd->add_option_function<std::string>(
        flag, [apply, &info](const std::string& text) { apply(option_value_from_text(info.kind, text)); }, help);
    o->type_name(type_name(info.kind));
    if (const std::string d = shown(info.name); !d.empty()) o->default_str(d);
  }
}

Expected<TrainingSettings> to_settings(const TableFlags& t, TrainingSettings in) {
  for (const auto& f : t.flags) {
    if (!f.given()) continue;
    if (auto ok = f.spec->set(in, f.spec->name, f.value()); !ok) return ok.error();
  }
  return in;
}

/// CLI11's message joins the arguments left over last first (detail::rjoin: "2 --bar 1 --foo"):
/// here in the order typed, with the option closest to the first unknown flag.
std::string extras_message(const CLI::App& app) {
  const CLI::App* cmd = &app;
  for (const CLI::App* sub : app.get_subcommands()) cmd = sub;
  const std::vector<std::string> left = cmd->remaining();
  std::string out = fmt::format("{} {} not expected", fmt::join(left, " "), left.size() == 1 ? "was" : "were");
  const auto flag = std::find_if(left.begin(), left.end(), [](const std::string& a) { return a.rfind("--", 0) == 0; });
  if (flag == left.end()) return out;
  std::vector<std::string> names;
  for (const CLI::Option* o : cmd->get_options())
    for (const std::string& n : o->get_lnames()) names.push_back("--" + n);
  const std::vector<std::string_view> views(names.begin(), names.end());
  const std::string typed = flag->substr(0, flag->find('='));
  if (auto guess = closest_name(typed, views)) out += fmt::format("; did you mean {}?", *guess);
  return out + fmt::format(" (actmem {} --help lists the options)", cmd->get_name());
}

std::string parse_error_message(const CLI::App& app, const CLI::ParseError& e) {
  if (dynamic_cast<const CLI::ExtrasError*>(&e) != nullptr && !app.get_subcommands().empty())
    return extras_message(app);
  if (dynamic_cast<const CLI::ArgumentMismatch*>(&e) == nullptr) return e.what();
  const CLI::Option* o = repeated_option(app);
  if (!o) return e.what();
  const std::string name = o->get_name();
  const auto& values = o->results();
  const std::string times = values.size() == 2 ? "twice" : fmt::format("{} times", values.size());
  if (o->get_items_expected_max() == 0)  // a switch
    return fmt::format("{} given {}; give it once", name, times);
  return fmt::format("{} given {} ({}); give it once", name, times,
                     values.size() == 2 ? fmt::format("{} and {}", values[0], values[1])
                                        : fmt::format("{}", fmt::join(values, ", ")));
}

}  // namespace actmem::cli
