// The Python front end: actmem._native, wrapped by actmem/__init__.py, on the public header alone
// (include/actmem/actmem.h; this target sees no other). Like the CLI it converts inputs and renders
// outputs and computes nothing: keyword arguments become a Job's options by name, results come back
// as the CLI's --json text, and every Error becomes a ValueError with the CLI's one-line message,
// options spelled as Python keywords (python_message()).
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <pybind11/pybind11.h>

#include <pybind11/stl.h>  // presets(): a list of str

#include "actmem/actmem.h"

namespace py = pybind11;

namespace actmem::python {

namespace {

/// `@tp 3: ...` -> `tp=3: ...`: an option followed by its value (a number, or text in quotes) reads as
/// the keyword that set it; any other mention is the bare keyword (`sp with tp=2`). zero_stage is zero.
std::string python_message(const std::string& message) {
  constexpr char kMark = '\x01';
  const std::string marked = render_message(message, [](const std::string& field) {
    return (field == "zero_stage" ? std::string("zero") : field) + kMark;
  });
  std::string out;
  out.reserve(marked.size());
  for (std::size_t i = 0; i < marked.size(); ++i) {
    if (marked[i] != kMark) {
      out += marked[i];
      continue;
    }
    const auto digit = [&](std::size_t k) { return k < marked.size() && marked[k] >= '0' && marked[k] <= '9'; };
    const bool value_follows = i + 2 < marked.size() && marked[i + 1] == ' ' &&
                               (digit(i + 2) || marked[i + 2] == '\'' || (marked[i + 2] == '-' && digit(i + 3)));
    if (value_follows) {
      out += '=';
      ++i;  // the space
    }
  }
  return out;
}

[[noreturn]] void raise(const Error& e) { throw py::value_error(python_message(e.message)); }

template <typename T>
T value_or_raise(Expected<T> r) {
  if (!r) raise(r.error());
  return std::move(*r);
}

/// A keyword argument as an OptionValue: bool before int (Python's bool is an int).
OptionValue option_value(const std::string& name, const py::handle& v) {
  if (py::isinstance<py::bool_>(v)) return v.cast<bool>();
  if (py::isinstance<py::int_>(v)) {
    try {
      return v.cast<int64_t>();
    } catch (const py::cast_error&) {
      raise(Error{ErrorKind::kInvalid, name, "@" + name + " " + py::repr(v).cast<std::string>() + ": too large"});
    }
  }
  if (py::isinstance<py::float_>(v)) return v.cast<double>();
  if (py::isinstance<py::str>(v)) return v.cast<std::string>();
  raise(Error{ErrorKind::kInvalid, name,
              "@" + name + " " + py::repr(v).cast<std::string>() + ": expected a number, True/False or a string"});
}

/// A job for the public API: the model (a config.json text when `is_json`, shown as display_name),
/// the training config or `vllm serve` line `from`, and the keywords in their order, each echoed as
/// written (tp=8, recompute='selective') where it overrides the file.
Job job(const std::string& model, bool is_json, const std::string& display_name, const py::dict& options,
        const std::string& from = "") {
  Job j{.model = is_json ? display_name : model, .config_json = is_json ? model : "", .from = from, .options = {},
        .origin = "the keywords"};
  for (const auto& [key, value] : options) {
    auto name = key.cast<std::string>();
    OptionValue v = option_value(name, value);
    std::string given = name + "=" + py::repr(value).cast<std::string>();
    j.options.push_back({std::move(name), std::move(v), std::move(given)});
  }
  return j;
}

/// (keyword, help) pairs of an option table, other options named as keywords.
py::list option_names(const char* table) {
  py::list out;
  for (const auto& o : value_or_raise(option_help(table))) out.append(py::make_tuple(o.name, python_message(o.help)));
  return out;
}

}  // namespace

}  // namespace actmem::python

PYBIND11_MODULE(_native, m) {
  using namespace actmem::python;
  using actmem::python::job;
  m.doc() = "actmem's C++ library; use the actmem package (actmem/__init__.py)";
  m.def(
      "estimate_json",
      [](const std::string& model, bool is_json, const std::string& name, const py::dict& options, const std::string& from) {
        return value_or_raise(actmem::estimate_json(job(model, is_json, name, options, from)));
      },
      py::arg("model"), py::arg("is_json"), py::arg("display_name"), py::arg("options"), py::arg("from_config") = "");
  m.def(
      "explain_text",
      [](const std::string& model, bool is_json, const std::string& name, const py::dict& options, const std::string& from) {
        return value_or_raise(actmem::explain_text(job(model, is_json, name, options, from)));
      },
      py::arg("model"), py::arg("is_json"), py::arg("display_name"), py::arg("options"), py::arg("from_config") = "");
  m.def(
      "serve_json",
      [](const std::string& model, bool is_json, const std::string& name, const py::dict& options, const std::string& from) {
        return value_or_raise(actmem::serve_json(job(model, is_json, name, options, from)));
      },
      py::arg("model"), py::arg("is_json"), py::arg("display_name"), py::arg("options"), py::arg("from_config") = "");
  m.def(
      "generate_json",
      [](const std::string& model, bool is_json, const std::string& name, const py::dict& options) {
        return value_or_raise(actmem::generate_json(job(model, is_json, name, options)));
      },
      py::arg("model"), py::arg("is_json"), py::arg("display_name"), py::arg("options"));
  m.def(
      "plan_json",
      [](const std::string& model, bool is_json, const std::string& name, const py::dict& options) {
        return value_or_raise(actmem::plan_json(job(model, is_json, name, options)));
      },
      py::arg("model"), py::arg("is_json"), py::arg("display_name"), py::arg("options"));
  m.def("options_json", [](const py::dict& options) {
    return value_or_raise(actmem::options_json(job("", false, "", options).options));
  }, py::arg("options"));
  m.def("plan_options", [] { return option_names("plan"); });
  m.def("training_options", [] { return option_names("training"); });
  m.def("serve_options", [] { return option_names("serve"); });
  m.def("machine_options", [] { return option_names("machine"); });
  m.def("presets", [] { return actmem::preset_names(); });
  m.def("python_message", &python_message, "an Error message with options spelled as keywords (for tests)");
}
