// What each framework says in explain()'s notes: the rules it follows, its selective
// recomputation, its MoE block, how it shards and how its activations relate to the textbook
// formula. One writer per framework; report.cc asks for each place in turn and never branches on
// the framework itself.
#pragma once

#include <string>
#include <vector>

#include "engine/engine.h"  // Prepared, Layout

namespace actmem::detail {

/// The places in the notes where a framework speaks, in the order the notes are written.
enum class NoteAt {
  kRules,      // whose code the saves follow (after the model's wrapper note)
  kRecompute,  // what its selective recomputation reruns and keeps
  kMoe,        // its MoE block: router and dispatcher (after the generic MoE sharding notes)
  kSharding,   // its own parallelism, or the lack of it (after the pipeline note)
  kFormula,    // how the textbook formula relates to what it saves (after the FLOPs note)
};

/// Appends the notes `p.workload.framework` writes at `at` (none at most places).
void add_framework_notes(NoteAt at, const Prepared& p, const Layout& o, std::vector<std::string>& notes);

}  // namespace actmem::detail
