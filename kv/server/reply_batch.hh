#pragma once

#include "core/future.hh"
#include "net/stream.hh"
#include "net/temporary_buffer.hh"

#include <string>
#include <vector>

namespace shoal::kv {

/// The replies a connection has gathered for one send: text appended to `text()`, and values
/// sent from item memory (`add_value`) between pieces of it. `write_to` hands everything to the
/// stream at once: text alone as before (a small batch gathered into the stream's buffers, a
/// large one handed over as it is), text and values as one list of buffers (one `put_many`,
/// one sendmsg over TCP, no copy of the values).
class reply_batch {
public:
    /// Where reply text is appended.
    std::string& text() noexcept { return _text; }
    /// Adds `value` (a buffer over item memory) after the text so far.
    void add_value(net::temporary_buffer value);
    /// Bytes gathered.
    size_t size() const noexcept { return _parts_bytes + _text.size(); }
    /// True when nothing is gathered.
    bool empty() const noexcept { return size() == 0; }
    /// Writes everything gathered to `out` and empties the batch.
    future<> write_to(net::output_stream& out);

private:
    void seal_text();
    std::string _text;
    std::vector<net::temporary_buffer> _parts;
    size_t _parts_bytes = 0;
};

} // namespace shoal::kv
