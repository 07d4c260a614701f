// The remote memory pool from C#: P/Invoke into libshoal_c against a shoal C++ pool server
// (capi_rdma_peer pool-server in a separate process, started by with_pool_server.sh: largest
// lease 1 MiB, quota 2 MiB per client, watermark 3 MiB). Leases regions, writes a pattern (from
// managed arrays and from registered buffers, waiting and not), reads it back and compares,
// checks the status codes of a bad address, an oversized lease, the quota, the watermark, an
// access past the end and use after release, then gives everything back. Prints
// "N passed, N failed".
//
// usage: mono test.exe   (SHOAL_POOL_SERVER=IP:PORT in the environment; csharp_test.sh)
using System;
using System.Diagnostics;
using System.Runtime.InteropServices;
using System.Threading;

static class Program {
    const int Mib = 1 << 20;
    static int passed, failed;
    static int doneCount, doneOk, leaseStatus = -1;
    static IntPtr asyncLease = IntPtr.Zero;
    // Kept in static fields: the native side calls them after the call that passed them returned.
    static readonly Shoal.DoneCallback OnDone = (user, status, error) => {
        if (status == Shoal.OK) { Interlocked.Increment(ref doneOk); }
        Interlocked.Increment(ref doneCount);
    };
    static readonly Shoal.LeaseCallback OnLeased = (user, status, lease, error) => {
        asyncLease = lease;
        Volatile.Write(ref leaseStatus, status);
    };

    static void Check(bool ok, string what) {
        if (ok) { passed++; } else { failed++; Console.Error.WriteLine("FAILED " + what + " (last error: " + Shoal.LastError() + ")"); }
    }

    static void CheckRc(int rc, int want, string what) {
        Check(rc == want, what + ": " + Shoal.Name(rc) + ", want " + Shoal.Name(want));
    }

    static UIntPtr U(long n) { return new UIntPtr((ulong)n); }

    /// Byte k of the pattern with `seed`: differs between seeds and along a page.
    static byte[] Pattern(int n, int seed) {
        var b = new byte[n];
        for (int k = 0; k < n; k++) { b[k] = (byte)((k * 7 + seed * 13 + (k >> 12)) & 0xff); }
        return b;
    }

    static bool Same(byte[] a, byte[] b) {
        if (a.Length != b.Length) { return false; }
        for (int i = 0; i < a.Length; i++) { if (a[i] != b[i]) { return false; } }
        return true;
    }

    static byte[] Slice(byte[] b, int offset, int n) {
        var s = new byte[n];
        Array.Copy(b, offset, s, 0, n);
        return s;
    }

    /// Waits (at most 120 s: a hang fails, a slow host does not) until `n` completions of OnDone arrived.
    static void WaitDone(int n) {
        for (var sw = Stopwatch.StartNew(); Volatile.Read(ref doneCount) < n && sw.ElapsedMilliseconds < 120000;) { Thread.Sleep(5); }
    }

    static int Main() {
        string server = Environment.GetEnvironmentVariable("SHOAL_POOL_SERVER");
        if (string.IsNullOrEmpty(server)) { Console.Error.WriteLine("SHOAL_POOL_SERVER is not set (run through with_pool_server.sh)"); return 2; }

        IntPtr rt;
        int rc = Shoal.StartRdmaRuntime(2, out rt);
        CheckRc(rc, Shoal.OK, "runtime start with rdma");
        if (rc != Shoal.OK) { Console.WriteLine(passed + " passed, " + failed + " failed"); return 1; }

        IntPtr pool, second, bad;
        CheckRc(Shoal.shoal_pool_connect(rt, 1, "garbage", 2000, out bad), Shoal.EINVAL, "connect to a bad address");
        rc = Shoal.shoal_pool_connect(rt, 1, server, 60000, out pool);
        CheckRc(rc, Shoal.OK, "connect to " + server);
        if (rc != Shoal.OK) { Shoal.shoal_runtime_destroy(rt); Console.WriteLine(passed + " passed, " + failed + " failed"); return 1; }

        // Refusals leave the pool usable.
        IntPtr a, b, c, x;
        CheckRc(Shoal.shoal_pool_lease(pool, U(0), out x), Shoal.EINVAL, "lease of 0 bytes");
        CheckRc(Shoal.shoal_pool_lease(pool, U(2 * Mib), out x), Shoal.EINVAL, "lease above the largest (1 MiB)");
        CheckRc(Shoal.shoal_pool_lease(pool, U(Mib), out a), Shoal.OK, "lease a (1 MiB)");
        Check(Shoal.shoal_lease_size(a).ToUInt64() == Mib, "lease a holds 1 MiB");

        // A whole lease written from a managed array and read back.
        byte[] data = Pattern(Mib, 1);
        CheckRc(Shoal.shoal_lease_write(a, 0, data, U(Mib)), Shoal.OK, "write 1 MiB");
        var back = new byte[Mib];
        CheckRc(Shoal.shoal_lease_read(a, 0, back, U(Mib)), Shoal.OK, "read 1 MiB");
        Check(Same(data, back), "1 MiB read back as written");
        // A small write in the middle changes exactly its bytes.
        byte[] hello = { (byte)'h', (byte)'e', (byte)'l', (byte)'l', (byte)'o' };
        CheckRc(Shoal.shoal_lease_write(a, 100, hello, U(5)), Shoal.OK, "write 5 B at 100");
        var nine = new byte[9];
        CheckRc(Shoal.shoal_lease_read(a, 98, nine, U(9)), Shoal.OK, "read 9 B at 98");
        Check(nine[0] == data[98] && nine[1] == data[99] && nine[2] == (byte)'h' && nine[6] == (byte)'o' && nine[7] == data[105] &&
              nine[8] == data[106], "the 5 B landed at 100, their neighbours unchanged");
        CheckRc(Shoal.shoal_lease_write(a, Mib - 2, hello, U(3)), Shoal.EINVAL, "write past the end");
        CheckRc(Shoal.shoal_lease_read(a, Mib + 1, back, U(0)), Shoal.EINVAL, "read past the end");

        // Quota (2 MiB per client) and watermark (3 MiB in all).
        CheckRc(Shoal.shoal_pool_lease(pool, U(Mib), out b), Shoal.OK, "lease b (1 MiB)");
        CheckRc(Shoal.shoal_pool_lease(pool, U(4096), out x), Shoal.EQUOTA, "a third lease over the quota");
        rc = Shoal.shoal_pool_connect(rt, 0, server, 60000, out second);
        CheckRc(rc, Shoal.OK, "a second client (shard 0)");
        if (rc == Shoal.OK) {
            CheckRc(Shoal.shoal_pool_lease(second, U(Mib), out c), Shoal.OK, "lease c by the second client");
            CheckRc(Shoal.shoal_pool_lease(second, U(4096), out x), Shoal.EWATERMARK, "a lease over the watermark");
            Shoal.shoal_lease_destroy(c); // gives c back
            Shoal.shoal_pool_destroy(second);
        }

        // Registered buffers of the pool's shard, without a copy by the library.
        IntPtr src, dst;
        CheckRc(Shoal.shoal_buffer_alloc(rt, 1, U(65536), out src), Shoal.OK, "buffer alloc (src)");
        CheckRc(Shoal.shoal_buffer_alloc(rt, 1, U(65536), out dst), Shoal.OK, "buffer alloc (dst)");
        byte[] page = Pattern(65536, 2);
        Marshal.Copy(page, 0, Shoal.shoal_buffer_data(src), page.Length);
        CheckRc(Shoal.shoal_lease_write_buffer(b, 4096, src, U(0), U(65536)), Shoal.OK, "write_buffer 64 KiB");
        var page_back = new byte[65536];
        CheckRc(Shoal.shoal_lease_read(b, 4096, page_back, U(65536)), Shoal.OK, "read 64 KiB");
        Check(Same(page, page_back), "64 KiB from a buffer read back as written");
        CheckRc(Shoal.shoal_lease_read_buffer(b, 4096 + 1000, dst, U(10), U(5000)), Shoal.OK, "read_buffer 5000 B");
        var part = new byte[5000];
        Marshal.Copy(Shoal.shoal_buffer_data(dst) + 10, part, 0, part.Length);
        Check(Same(part, Slice(page, 1000, 5000)), "read_buffer put the bytes at its offset");
        CheckRc(Shoal.shoal_lease_write_buffer(b, 0, src, U(65000), U(1000)), Shoal.EINVAL, "write_buffer past the buffer");

        // Without waiting: a write from a managed array (copied at once), a write from a buffer,
        // then reads into unmanaged memory and a buffer; a lease over the quota fails in its callback.
        byte[] late = Pattern(8192, 3);
        CheckRc(Shoal.shoal_lease_write_async(b, 200000, late, U(late.Length), OnDone, IntPtr.Zero), Shoal.OK, "write_async");
        Array.Clear(late, 0, late.Length); // the library copied it already
        CheckRc(Shoal.shoal_lease_write_buffer_async(b, 300000, src, U(0), U(8192), OnDone, IntPtr.Zero), Shoal.OK, "write_buffer_async");
        WaitDone(2);
        Check(Volatile.Read(ref doneOk) == 2, "both writes without waiting completed (" + doneOk + " of " + doneCount + ")");
        IntPtr raw = Marshal.AllocHGlobal(8192);
        CheckRc(Shoal.shoal_lease_read_async(b, 200000, raw, U(8192), OnDone, IntPtr.Zero), Shoal.OK, "read_async");
        CheckRc(Shoal.shoal_lease_read_buffer_async(b, 300000, dst, U(0), U(8192), OnDone, IntPtr.Zero), Shoal.OK, "read_buffer_async");
        WaitDone(4);
        Check(Volatile.Read(ref doneOk) == 4, "both reads without waiting completed (" + doneOk + " of " + doneCount + ")");
        var got = new byte[8192];
        Marshal.Copy(raw, got, 0, got.Length);
        Check(Same(got, Pattern(8192, 3)), "read_async got what write_async wrote");
        Marshal.Copy(Shoal.shoal_buffer_data(dst), got, 0, got.Length);
        Check(Same(got, Slice(page, 0, 8192)), "read_buffer_async got what write_buffer_async wrote");
        Marshal.FreeHGlobal(raw);
        CheckRc(Shoal.shoal_pool_lease_async(pool, U(4096), OnLeased, IntPtr.Zero), Shoal.OK, "lease_async handed over");
        for (var sw = Stopwatch.StartNew(); Volatile.Read(ref leaseStatus) < 0 && sw.ElapsedMilliseconds < 120000;) { Thread.Sleep(5); }
        Check(leaseStatus == Shoal.EQUOTA && asyncLease == IntPtr.Zero, "lease_async over the quota: " + Shoal.Name(leaseStatus));
        Shoal.shoal_buffer_free(src);
        Shoal.shoal_buffer_free(dst);

        // Release: later use is refused, the quota is free again, releasing twice is fine.
        CheckRc(Shoal.shoal_lease_release(a), Shoal.OK, "release a");
        CheckRc(Shoal.shoal_lease_release(a), Shoal.OK, "release a again");
        CheckRc(Shoal.shoal_lease_write(a, 0, hello, U(1)), Shoal.ECLOSED, "write after release");
        Shoal.shoal_lease_destroy(a);
        CheckRc(Shoal.shoal_pool_lease(pool, U(Mib), out a), Shoal.OK, "lease again within the freed quota");
        CheckRc(Shoal.shoal_lease_release_async(a, OnDone, IntPtr.Zero), Shoal.OK, "release_async");
        WaitDone(5);
        Check(Volatile.Read(ref doneOk) == 5, "release_async completed");
        Shoal.shoal_lease_destroy(a);

        // Closing the pool closes its leases.
        CheckRc(Shoal.shoal_pool_close(pool), Shoal.OK, "pool close");
        CheckRc(Shoal.shoal_lease_read(b, 0, back, U(8)), Shoal.ECLOSED, "read of a lease of a closed pool");
        CheckRc(Shoal.shoal_pool_lease(pool, U(4096), out x), Shoal.ECLOSED, "lease on a closed pool");
        Shoal.shoal_lease_destroy(b);
        Shoal.shoal_pool_destroy(pool);
        CheckRc(Shoal.shoal_runtime_stop(rt), Shoal.OK, "runtime stop");
        Shoal.shoal_runtime_destroy(rt);
        Console.WriteLine(passed + " passed, " + failed + " failed");
        return failed == 0 ? 0 : 1;
    }
}
