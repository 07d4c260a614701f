#include "capi/status.hh"

#include "core/alien.hh"
#include "core/future_util.hh"
#include "kv/client/client_types.hh"
#include "net/rdma/error.hh"
#include "net/rdma/services/remote_pool.hh"
#include "shoal/shoal_c.h"

#include <cstdlib>
#include <new>
#include <stdexcept>

namespace shoal::capi {

// The calling thread's last error (shoal_last_error).
thread_local std::string tl_last_error;

failure classify(std::exception_ptr ep) noexcept {
    try {
        std::rethrow_exception(ep);
    } catch (const kv::client_error& e) {
        switch (e.code()) {
        case kv::client_errc::bad_request:
            return {SHOAL_EINVAL, e.what()};
        case kv::client_errc::connection:
            return {SHOAL_ECONNECTION, e.what()};
        case kv::client_errc::server:
            return {SHOAL_ESERVER, e.what()};
        }
        return {SHOAL_EINTERNAL, e.what()};
    } catch (const closed_error& e) {
        return {SHOAL_ECLOSED, e.what()};
    } catch (const net::rdma::remote_pool_error& e) {
        switch (e.why()) {
        case net::rdma::remote_pool_error::reason::quota:
            return {SHOAL_EQUOTA, e.what()};
        case net::rdma::remote_pool_error::reason::watermark:
            return {SHOAL_EWATERMARK, e.what()};
        case net::rdma::remote_pool_error::reason::bad_request:
            return {SHOAL_EINVAL, e.what()};
        case net::rdma::remote_pool_error::reason::unknown_lease:
            return {SHOAL_ENOTFOUND, e.what()};
        case net::rdma::remote_pool_error::reason::no_memory:
            return {SHOAL_ESERVER, e.what()};
        }
        return {SHOAL_ESERVER, e.what()};
    } catch (const net::rdma::connection_error& e) {
        return {SHOAL_ECONNECTION, e.what()};
    } catch (const net::rdma::connection_closed& e) {
        return {SHOAL_ECONNECTION, e.what()};
    } catch (const net::rdma::pool_exhausted& e) {
        return {SHOAL_ENOMEM, e.what()};
    } catch (const net::rdma::rdma_error& e) {
        return {SHOAL_EUNAVAILABLE, e.what()};
    } catch (const alien::engine_stopped& e) {
        return {SHOAL_ECLOSED, e.what()};
    } catch (const timed_out_error& e) {
        return {SHOAL_ETIMEDOUT, e.what()};
    } catch (const std::bad_alloc&) {
        return {SHOAL_ENOMEM, "out of memory"};
    } catch (const std::invalid_argument& e) {
        return {SHOAL_EINVAL, e.what()};
    } catch (const std::out_of_range& e) {
        return {SHOAL_EINVAL, e.what()};
    } catch (const std::logic_error& e) {
        return {SHOAL_ESTATE, e.what()};
    } catch (const std::exception& e) {
        return {SHOAL_EINTERNAL, e.what()};
    } catch (...) {
        return {SHOAL_EINTERNAL, "an unknown exception"};
    }
}

int fail(int status, std::string text) noexcept {
    try {
        tl_last_error = std::move(text);
    } catch (...) {
        tl_last_error.clear();
    }
    return status;
}

} // namespace shoal::capi

extern "C" {

const char* shoal_last_error(void) {
    return shoal::capi::tl_last_error.c_str();
}

const char* shoal_status_name(int status) {
    switch (status) {
    case SHOAL_OK:
        return "SHOAL_OK";
    case SHOAL_EINVAL:
        return "SHOAL_EINVAL";
    case SHOAL_ECLOSED:
        return "SHOAL_ECLOSED";
    case SHOAL_ESTATE:
        return "SHOAL_ESTATE";
    case SHOAL_ENOTFOUND:
        return "SHOAL_ENOTFOUND";
    case SHOAL_ETOOSMALL:
        return "SHOAL_ETOOSMALL";
    case SHOAL_ENOTSTORED:
        return "SHOAL_ENOTSTORED";
    case SHOAL_EEXISTS:
        return "SHOAL_EEXISTS";
    case SHOAL_ECONNECTION:
        return "SHOAL_ECONNECTION";
    case SHOAL_ESERVER:
        return "SHOAL_ESERVER";
    case SHOAL_ETIMEDOUT:
        return "SHOAL_ETIMEDOUT";
    case SHOAL_ENOMEM:
        return "SHOAL_ENOMEM";
    case SHOAL_EINTERNAL:
        return "SHOAL_EINTERNAL";
    case SHOAL_EUNAVAILABLE:
        return "SHOAL_EUNAVAILABLE";
    case SHOAL_EQUOTA:
        return "SHOAL_EQUOTA";
    case SHOAL_EWATERMARK:
        return "SHOAL_EWATERMARK";
    }
    return "SHOAL_UNKNOWN";
}

int shoal_version(void) {
    return SHOAL_C_VERSION_MAJOR * 10000 + SHOAL_C_VERSION_MINOR * 100;
}

void shoal_free(void* p) {
    std::free(p);
}

} // extern "C"
