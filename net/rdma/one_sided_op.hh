#pragma once

#include "net/rdma/memory_region.hh"

#include <cstdint>
#include <utility>

namespace shoal::net::rdma::internal {

/// One one-sided operation as `rdma::connection` was asked for it: what it does, on which local
/// span and remote bytes, with which immediate or atomic operands. The future, cancellable and
/// `op_completion` forms of every operation start from it, so each form is written once.
struct one_sided_op {
    /// The operation (in the order of the matching `send_slot::op` values).
    enum class kind : uint8_t { read, write, write_imm, fetch_add, compare_swap };

    kind what = kind::read;
    local_span local;     ///< a READ's destination, a WRITE's source (atomics: unused)
    remote_region remote; ///< the peer's region
    uint64_t offset = 0;  ///< where in `remote`
    uint32_t imm = 0;     ///< WRITE_WITH_IMM's immediate
    uint64_t operand = 0; ///< FETCH_AND_ADD's addend, COMPARE_AND_SWAP's expected value
    uint64_t swap = 0;    ///< COMPARE_AND_SWAP's new value

    /// READ of `dst.length` bytes at `offset` of `src` into `dst`.
    static one_sided_op read(local_span dst, const remote_region& src, uint64_t offset) noexcept {
        return {.what = kind::read, .local = std::move(dst), .remote = src, .offset = offset};
    }
    /// WRITE of `src` to `offset` of `dst`.
    static one_sided_op write(local_span src, const remote_region& dst, uint64_t offset) noexcept {
        return {.what = kind::write, .local = std::move(src), .remote = dst, .offset = offset};
    }
    /// WRITE_WITH_IMM of `src` to `offset` of `dst`, the peer receiving `imm`.
    static one_sided_op write_with_imm(local_span src, const remote_region& dst, uint64_t offset,
                                       uint32_t imm) noexcept {
        return {
            .what = kind::write_imm, .local = std::move(src), .remote = dst, .offset = offset, .imm = imm};
    }
    /// FETCH_AND_ADD of `add` to the word at `offset` of `dst`.
    static one_sided_op fetch_add(const remote_region& dst, uint64_t offset, uint64_t add) noexcept {
        return {.what = kind::fetch_add, .remote = dst, .offset = offset, .operand = add};
    }
    /// COMPARE_AND_SWAP of the word at `offset` of `dst` from `expected` to `desired`.
    static one_sided_op compare_swap(const remote_region& dst, uint64_t offset, uint64_t expected,
                                     uint64_t desired) noexcept {
        return {.what = kind::compare_swap,
                .remote = dst,
                .offset = offset,
                .operand = expected,
                .swap = desired};
    }

    /// FETCH_AND_ADD or COMPARE_AND_SWAP: 8 bytes, aligned, yielding the previous value.
    bool atomic() const noexcept { return what >= kind::fetch_add; }
    /// A WRITE_WITH_IMM consumes one of the peer's receives: it needs a send credit.
    bool needs_credit() const noexcept { return what == kind::write_imm; }
    /// Bytes it touches in the remote region.
    uint64_t length() const noexcept { return atomic() ? 8 : local.length; }
    /// The verbs name, for errors.
    const char* name() const noexcept {
        switch (what) {
        case kind::read:
            return "READ";
        case kind::write:
            return "WRITE";
        case kind::write_imm:
            return "WRITE_WITH_IMM";
        case kind::fetch_add:
            return "FETCH_AND_ADD";
        case kind::compare_swap:
            return "COMPARE_AND_SWAP";
        }
        return "?";
    }
};

} // namespace shoal::net::rdma::internal
