// The step's timeline in the estimate (engine/timeline.h): `memory.timeline` and
// `memory.reserved_bytes` in --json, the reserved line of the table.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "engine/prepared.h"
#include "engine/timeline.h"
#include "util/text_table.h"

namespace actmem::detail {

/// The report's timeline replayed under its @alloc_conf; an error when the report has no model
/// behind it (a default-constructed Report).
Expected<TimelineMemory> report_timeline_memory(const Report& report);

/// memory.reserved_bytes and memory.timeline: {events, allocated_peak_bytes, rounded_peak_bytes,
/// reserved_peak_bytes, segments, alloc_conf, notes, counts}.
void add_timeline_json(const Report& report, nlohmann::json& memory);

/// The memory table's row "Reserved (caching allocator)" after its total; returns the note that
/// says what was replayed ("" and no row without a timeline).
std::string add_reserved_row(const Report& report, TextTable& table);

}  // namespace actmem::detail
