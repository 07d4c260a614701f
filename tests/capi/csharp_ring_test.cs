// The ring channel from C#: P/Invoke (DllImport) into libshoal_c. Opens a ring producer on the
// descriptor of a shoal C++ consumer (capi_rdma_peer ring-consumer, a separate process) and
// writes COUNT records into its ring, half copied from managed arrays and half from a
// registered shoal buffer, some of them without waiting; the consumer checks order, lengths and
// checksums. Every 100th record starts a batch of 32 sent by one shoal_ring_send_many (every
// other one _async), the first holding an empty payload and a message of the ring's largest
// size; a batch with a too-large message in the middle must be refused with nothing sent (the
// consumer would see a record out of order). Also checks that descriptor garbage is refused.
// Prints "N passed, N failed".
//
// usage: mono test.exe ADDRESS DESCRIPTOR_HEX COUNT   (run by csharp_ring_test.sh)
using System;
using System.Diagnostics;
using System.Runtime.InteropServices;
using System.Threading;

static partial class Shoal { // the rest: shoal_native.cs
    [DllImport(Lib)] public static extern int shoal_ring_producer_open(IntPtr rt, uint shard, string address, byte[] descriptor, UIntPtr size, uint timeout_ms, out IntPtr producer);
    [DllImport(Lib)] public static extern UIntPtr shoal_ring_producer_max_message(IntPtr producer);
    [DllImport(Lib)] public static extern int shoal_ring_send(IntPtr producer, byte[] data, UIntPtr size);
    [DllImport(Lib)] public static extern int shoal_ring_send_buffer(IntPtr producer, IntPtr buf, UIntPtr offset, UIntPtr size);
    [DllImport(Lib)] public static extern int shoal_ring_send_async(IntPtr producer, byte[] data, UIntPtr size, DoneCallback done, IntPtr user);
    /// `data[i]` must stay valid (pinned) during the call; the _async form copies them first.
    [DllImport(Lib)] public static extern int shoal_ring_send_many(IntPtr producer, UIntPtr count, IntPtr[] data, UIntPtr[] sizes);
    [DllImport(Lib)] public static extern int shoal_ring_send_many_async(IntPtr producer, UIntPtr count, IntPtr[] data, UIntPtr[] sizes, DoneCallback done, IntPtr user);
    [DllImport(Lib)] public static extern void shoal_ring_producer_destroy(IntPtr producer);
}

static class Program {
    static int passed, failed;
    static int asyncDone, asyncOk;
    // Kept in a static field: the native side calls it after the call that passed it returned.
    static readonly Shoal.DoneCallback OnSent = (user, status, error) => {
        if (status == Shoal.OK) { Interlocked.Increment(ref asyncOk); }
        Interlocked.Increment(ref asyncDone);
    };

    static void Check(bool ok, string what) {
        if (ok) { passed++; } else { failed++; Console.Error.WriteLine("FAILED " + what + " (last error: " + Shoal.LastError() + ")"); }
    }

    static ulong Fnv1a(byte[] b, int offset, int n) {
        ulong h = 14695981039346656037UL;
        for (int i = 0; i < n; i++) { h = (h ^ b[offset + i]) * 1099511628211UL; }
        return h;
    }

    /// Record i: u32 index, u32 n, n payload bytes ((index * 31 + k) & 0xff), u64 FNV-1a.
    static byte[] Record(int index) { return Record(index, index % 97 == 0 ? 3000 : (index * 37) % 500); }

    static byte[] Record(int index, int n) {
        var r = new byte[16 + n];
        BitConverter.GetBytes((uint)index).CopyTo(r, 0);
        BitConverter.GetBytes((uint)n).CopyTo(r, 4);
        for (int k = 0; k < n; k++) { r[8 + k] = (byte)((index * 31 + k) & 0xff); }
        BitConverter.GetBytes(Fnv1a(r, 8, n)).CopyTo(r, 8 + n);
        return r;
    }

    /// Sends `messages` with one shoal_ring_send_many (or _async, reporting to OnSent), each
    /// array pinned during the call.
    static int SendMany(IntPtr p, byte[][] messages, bool async) {
        var pins = new GCHandle[messages.Length];
        var data = new IntPtr[messages.Length];
        var sizes = new UIntPtr[messages.Length];
        try {
            for (int k = 0; k < messages.Length; k++) {
                pins[k] = GCHandle.Alloc(messages[k], GCHandleType.Pinned);
                data[k] = pins[k].AddrOfPinnedObject();
                sizes[k] = new UIntPtr((uint)messages[k].Length);
            }
            var count = new UIntPtr((uint)messages.Length);
            return async ? Shoal.shoal_ring_send_many_async(p, count, data, sizes, OnSent, IntPtr.Zero)
                         : Shoal.shoal_ring_send_many(p, count, data, sizes);
        } finally {
            foreach (var h in pins) { if (h.IsAllocated) { h.Free(); } }
        }
    }

    static byte[] Hex(string s) {
        var b = new byte[s.Length / 2];
        for (int i = 0; i < b.Length; i++) { b[i] = Convert.ToByte(s.Substring(2 * i, 2), 16); }
        return b;
    }

    static int Main(string[] args) {
        if (args.Length != 3) { Console.Error.WriteLine("usage: test.exe ADDRESS DESCRIPTOR_HEX COUNT"); return 2; }
        string address = args[0];
        byte[] descriptor = Hex(args[1]);
        int count = int.Parse(args[2]);
        Check(BitConverter.IsLittleEndian, "a little-endian machine (the record format)");

        IntPtr rt;
        int rc = Shoal.StartRdmaRuntime(2, out rt);
        Check(rc == Shoal.OK, "runtime start with rdma: " + Shoal.Name(rc));
        if (rc != Shoal.OK) { Console.WriteLine(passed + " passed, " + failed + " failed"); return 1; }

        // Garbage is refused before anything is sent.
        IntPtr p;
        var garbage = (byte[])descriptor.Clone();
        garbage[3] ^= 0x20;
        rc = Shoal.shoal_ring_producer_open(rt, 1, address, garbage, new UIntPtr((uint)garbage.Length), 5000, out p);
        Check(rc == Shoal.EINVAL && p == IntPtr.Zero, "descriptor garbage refused: " + Shoal.Name(rc));
        rc = Shoal.shoal_ring_producer_open(rt, 1, address, descriptor, new UIntPtr(5), 5000, out p);
        Check(rc == Shoal.EINVAL, "a short descriptor refused: " + Shoal.Name(rc));

        rc = Shoal.shoal_ring_producer_open(rt, 1, address, descriptor, new UIntPtr((uint)descriptor.Length), 60000, out p);
        Check(rc == Shoal.OK, "producer open: " + Shoal.Name(rc));
        if (rc == Shoal.OK) {
            int largest = (int)Shoal.shoal_ring_producer_max_message(p).ToUInt64();
            Check(largest == (64 << 10) - 8, "largest message of a 64 KiB ring");
            // A too-large message in the middle: refused, nothing sent (else the consumer sees
            // records 0 and 1 twice).
            int refused = SendMany(p, new byte[][] { Record(0), new byte[largest + 1], Record(1) }, false);
            Check(refused == Shoal.EINVAL, "a batch with a too-large message refused: " + Shoal.Name(refused));
            refused = SendMany(p, new byte[][] { Record(0), new byte[largest + 1] }, true);
            Check(refused == Shoal.EINVAL, "the same without waiting: " + Shoal.Name(refused));
            IntPtr buf;
            Check(Shoal.shoal_buffer_alloc(rt, 1, new UIntPtr(4096), out buf) == Shoal.OK, "buffer alloc");
            int sent = 0, asyncSent = 0, batches = 0;
            for (int i = 0; i < count; i++) {
                if (i % 100 == 50 && i + 32 <= count) {  // a batch of 32: one call
                    var batch = new byte[32][];
                    for (int k = 0; k < 32; k++) { batch[k] = Record(i + k); }
                    if (batches == 0) {
                        batch[0] = Record(i, 0);
                        batch[1] = Record(i + 1, largest - 16);
                    }
                    bool async = batches++ % 2 == 1;
                    int b = SendMany(p, batch, async);
                    if (b != Shoal.OK) { Check(false, "send_many at " + i + ": " + Shoal.Name(b)); break; }
                    asyncSent += async ? 1 : 0;
                    sent += 32;
                    i += 31;
                    continue;
                }
                byte[] r = Record(i);
                int s;
                if (i % 4 == 1) {  // from a registered buffer, without a copy by the library
                    Marshal.Copy(r, 0, Shoal.shoal_buffer_data(buf), r.Length);
                    s = Shoal.shoal_ring_send_buffer(p, buf, UIntPtr.Zero, new UIntPtr((uint)r.Length));
                } else if (i % 4 == 3) {  // without waiting (the bytes are copied first)
                    s = Shoal.shoal_ring_send_async(p, r, new UIntPtr((uint)r.Length), OnSent, IntPtr.Zero);
                    asyncSent += s == Shoal.OK ? 1 : 0;
                } else {
                    s = Shoal.shoal_ring_send(p, r, new UIntPtr((uint)r.Length));
                }
                if (s == Shoal.OK) { sent++; } else { Check(false, "send " + i + ": " + Shoal.Name(s)); break; }
            }
            Check(sent == count, "every record sent (" + sent + " of " + count + ")");
            Check(batches >= count / 100 - 1, "records sent in batches of 32 (" + batches + " batches)");
            for (var sw = Stopwatch.StartNew(); Volatile.Read(ref asyncDone) < asyncSent && sw.ElapsedMilliseconds < 120000;) { Thread.Sleep(10); }
            Check(asyncOk == asyncSent, "every send without waiting completed (" + asyncOk + " of " + asyncSent + ")");
            Shoal.shoal_buffer_free(buf);
            Shoal.shoal_ring_producer_destroy(p);
        }
        Shoal.shoal_runtime_destroy(rt);
        Console.WriteLine(passed + " passed, " + failed + " failed");
        return failed == 0 ? 0 : 1;
    }
}
