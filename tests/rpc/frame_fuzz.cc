// libFuzzer target: the RPC frame header decoder and the value deserializer on untrusted bytes.
// The input is a sequence of frames (header, payload, attachment bytes); each payload is read
// as several types. Anything but a clean protocol_error (a crash, UB, another exception) is a
// finding. Builds without the reactor (rpc/wire.hh and rpc/serialize.hh only).

#include "rpc/serialize.hh"
#include "rpc/wire.hh"

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace {

using namespace shoal;
using namespace shoal::rpc;

struct inner {
    int16_t a;
    std::optional<std::string_view> b;
};

struct outer {
    uint64_t id;
    std::vector<inner> items;
    std::map<std::string, std::vector<double>> table;
    std::variant<std::monostate, bool, attachment, std::array<uint8_t, 3>> choice;
    std::tuple<bytes_view, float, std::pair<int8_t, std::string>> rest;
};

template <typename T>
void try_read(std::string_view payload, const net::temporary_buffer& att) {
    reader r(payload, &att);
    try {
        T v = deserialize<T>(r);
        // What was read must encode back into as many bytes as it consumed (map order may
        // differ from the input's, so the bytes themselves may not).
        std::string again(serialized_size(v), '\0');
        rpc::attachment_list atts;
        writer w(again.data(), &atts);
        serialize(w, v);
        if (again.size() != payload.size() - r.remaining()) {
            __builtin_trap();
        }
    } catch (const protocol_error&) {
    }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const char* p = reinterpret_cast<const char*>(data);
    while (size >= frame_header::size) {
        frame_header h;
        try {
            h = frame_header::decode(p, 1 << 20);
        } catch (const protocol_error&) {
            return 0;
        }
        p += frame_header::size;
        size -= frame_header::size;
        if (h.body_size() > size) {
            return 0; // a truncated frame: the stream reader would wait for more
        }
        std::string_view payload(p, h.payload_size);
        auto att = net::temporary_buffer::copy_of(std::string_view(p + h.payload_size, h.attachment_size));
        try_read<outer>(payload, att);
        try_read<std::tuple<std::string, std::vector<std::string>>>(payload, att);
        try_read<std::vector<std::optional<std::vector<bool>>>>(payload, att);
        try_read<std::tuple<attachment, attachment, uint32_t>>(payload, att);
        p += h.body_size();
        size -= h.body_size();
    }
    return 0;
}
