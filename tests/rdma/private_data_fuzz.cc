// libFuzzer target: rdma_cm private data from a peer (connect requests, accept replies and
// rejections) is untrusted input. Decoding never crashes; whatever decodes re-encodes to the same
// parameters, and a rejection reason is returned only for data that carries shoal's magic.

#include "net/rdma/private_data.hh"

#include <cstdint>
#include <cstdlib>
#include <span>
#include <string>

using namespace shoal::net::rdma::internal;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    std::span<const uint8_t> bytes(data, size);
    std::string error;
    if (auto p = decode_conn_params(bytes, error)) {
        auto again = encode_conn_params(*p);
        std::string error2;
        auto q = decode_conn_params(again, error2);
        if (!q || q->recv_buffer_size != p->recv_buffer_size || q->credits != p->credits ||
            q->ctrl_credits != p->ctrl_credits || q->region.has_value() != p->region.has_value()) {
            std::abort();
        }
    } else if (error.empty()) {
        std::abort(); // a rejection always says why
    }
    if (auto reason = decode_reject_reason(bytes)) {
        if (reason->size() > size) {
            std::abort();
        }
    }
    return 0;
}
