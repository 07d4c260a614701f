#pragma once

#include "core/app.hh"

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace shoal::apps {

/// The non-empty items of `text` separated by `sep` ("4K,,32K" gives "4K" and "32K").
std::vector<std::string> split(const std::string& text, char sep = ',');

/// The option `name` as a non-negative number of seconds; throws std::invalid_argument naming
/// the option.
std::chrono::duration<double> seconds_of(const app& a, const std::string& name);

/// The option --port as a TCP/rdma_cm port (0..65535); throws std::invalid_argument.
uint16_t port_of(const app& a);

} // namespace shoal::apps
