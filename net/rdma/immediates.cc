// Tagged immediates: the channels of a connection's WRITE_WITH_IMM events.
#include "net/rdma/immediates.hh"

#include "net/rdma/connection.hh"
#include "net/rdma/connection_impl.hh"
#include "net/rdma/context.hh"

#include <stdexcept>
#include <string>

namespace shoal::net::rdma {

namespace internal {

void connection_impl::deliver_immediate(uint32_t imm) noexcept {
    if (!_tags) {
        if (_imm_waiter) {
            auto pr = std::move(*_imm_waiter);
            _imm_waiter.reset();
            consumed(1);
            pr.set_value(imm);
        } else {
            _imm.push_back(imm);
        }
        return;
    }
    tag_channel& ch = (*_tags)[imm >> immediate_value_bits];
    uint32_t value = imm & immediate_channel::max_value;
    if (ch.waiter) {
        auto pr = std::move(*ch.waiter);
        ch.waiter.reset();
        consumed(1);
        pr.set_value(value);
    } else {
        ch.values.push_back(value); // kept until the channel opens and reads it
    }
}

void connection_impl::open_tag(unsigned tag) {
    SHOAL_RDMA_CHECK_SHARD(_shard, "RDMA connection");
    if (tag >= immediate_tags) {
        throw std::invalid_argument("connection::immediates: tag " + std::to_string(tag) +
                                    " is not in 0 to " + std::to_string(immediate_tags - 1));
    }
    if (!_tags) {
        if (_imm_waiter) {
            throw std::logic_error("connection::immediates: next_immediate() is pending on this connection");
        }
        _tags = std::make_unique<std::array<tag_channel, immediate_tags>>();
        // Immediates that arrived untagged-mode are routed by their tag now.
        std::deque<uint32_t> pending = std::move(_imm);
        _imm.clear();
        for (uint32_t v : pending) {
            (*_tags)[v >> immediate_value_bits].values.push_back(v & immediate_channel::max_value);
        }
    }
    tag_channel& ch = (*_tags)[tag];
    if (ch.open) {
        throw std::logic_error("connection::immediates: tag " + std::to_string(tag) + " is already open");
    }
    ch.open = true;
}

void connection_impl::close_tag(unsigned tag) noexcept {
    tag_channel& ch = (*_tags)[tag];
    ch.open = false;
    unsigned n = unsigned(ch.values.size());
    ch.values.clear();
    if (ch.waiter) {
        auto pr = std::move(*ch.waiter);
        ch.waiter.reset();
        pr.set_exception(std::make_exception_ptr(std::logic_error("immediate_channel closed while reading")));
    }
    if (n) {
        consumed(n);
    }
}

future<uint32_t> connection_impl::next_tagged(unsigned tag) {
    SHOAL_RDMA_CHECK_SHARD(_shard, "RDMA connection");
    tag_channel& ch = (*_tags)[tag];
    if (!ch.values.empty()) {
        uint32_t v = ch.values.front();
        ch.values.pop_front();
        consumed(1);
        return make_ready_future<uint32_t>(v);
    }
    if (_state != state::established && _state != state::connecting) {
        return make_exception_future<uint32_t>(_error ? _error : closed_error());
    }
    if (ch.waiter) {
        return make_exception_future<uint32_t>(
            std::logic_error("immediate_channel::next() called while another is pending"));
    }
    ch.waiter.emplace();
    return ch.waiter->get_future();
}

void connection_impl::fail_tag_waiters(std::exception_ptr ex) noexcept {
    if (!_tags) {
        return;
    }
    for (tag_channel& ch : *_tags) {
        if (ch.waiter) {
            auto pr = std::move(*ch.waiter);
            ch.waiter.reset();
            pr.set_exception(ex);
        }
    }
}

} // namespace internal

immediate_channel& immediate_channel::operator=(immediate_channel&& o) noexcept {
    if (this != &o) {
        if (_ref) {
            _ref->impl().close_tag(_tag);
        }
        _ref = std::move(o._ref);
        _tag = o._tag;
    }
    return *this;
}

immediate_channel::~immediate_channel() {
    if (_ref) {
        _ref->impl().close_tag(_tag);
    }
}

// immediate_channel::write_with_imm is in one_sided.cc, beside the WRITE_WITH_IMM it starts.

future<uint32_t> immediate_channel::next() {
    return _ref->impl().next_tagged(_tag);
}

immediate_channel connection::immediates(unsigned tag) {
    impl().open_tag(tag);
    return immediate_channel(_ref, tag);
}

} // namespace shoal::net::rdma
