// Calls that hand far memory to the kernel through ioctl, recvmmsg/sendmmsg and raw
// syscall(2), each on buffers whose pages were evicted just before (under -L=8: 32 MB touched
// in between). On the in-thread far-memory path the kernel answers its own access to a page
// that is not resident with EFAULT; the runtime must bring them in first.
// Prints "kernelcalls: 8 calls right" and exits 0, or names the first call that went wrong
// and exits 1.
// usage: kernelcalls
#define _GNU_SOURCE
#include <errno.h>
#include <linux/futex.h>
#include <linux/random.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#define BIG (32u << 20)
#define MSGS 4
#define MSG_BYTES 3000

static char *big;

// Touches every page of 32 MB: under -L=8 everything touched before is evicted.
static void evict(void) {
    for (size_t i = 0; i < BIG; i += 4096)
        big[i]++;
}

// A buffer of its own pages in the heap (far memory), filled with `seed`'s pattern.
static unsigned char *buffer(size_t len, int seed) {
    unsigned char *b = malloc(len + (1 << 20));
    if (!b) {
        perror("malloc");
        exit(1);
    }
    for (size_t i = 0; i < len; i++)
        b[i] = (unsigned char)(i * 7 + seed);
    return b;
}

static int same(const unsigned char *b, size_t len, int seed) {
    for (size_t i = 0; i < len; i++)
        if (b[i] != (unsigned char)(i * 7 + seed))
            return 0;
    return 1;
}

static void fail(const char *what) {
    printf("kernelcalls: %s went wrong (errno %d: %s)\n", what, errno, strerror(errno));
    exit(1);
}

int main(void) {
    big = malloc(BIG);
    if (!big)
        return 1;
    memset(big, 1, BIG);
    int calls = 0;
    int p[2];
    if (pipe(p))
        fail("pipe");

    // ioctl with a request older than the size encoding: FIONREAD writes an int.
    unsigned char *data = buffer(1000, 3);
    if (write(p[1], data, 1000) != 1000)
        fail("write");
    int *pending = (int *)buffer(4096, 0);
    evict();
    if (ioctl(p[0], FIONREAD, pending) != 0 || *pending != 1000)
        fail("ioctl FIONREAD");
    calls++;

    // ioctl with the size in the request: RNDGETENTCNT is _IOR('R', 0, int).
    FILE *urandom = fopen("/dev/urandom", "r");
    int *entropy = (int *)buffer(4096, 0);
    *entropy = -1;
    evict();
    if (!urandom || ioctl(fileno(urandom), RNDGETENTCNT, entropy) != 0 || *entropy < 0)
        fail("ioctl RNDGETENTCNT");
    calls++;

    // Raw read(2) into evicted memory.
    unsigned char *in = buffer(1000, 0);
    evict();
    if (syscall(SYS_read, p[0], in, 1000) != 1000 || !same(in, 1000, 3))
        fail("syscall(SYS_read)");
    calls++;

    // Raw write(2) from evicted memory.
    unsigned char *out = buffer(1000, 5);
    evict();
    if (syscall(SYS_write, p[1], out, 1000) != 1000)
        fail("syscall(SYS_write)");
    unsigned char back[1000];
    if (read(p[0], back, 1000) != 1000 || !same(back, 1000, 5))
        fail("read back");
    calls++;

    // Raw getrandom(2) into evicted memory: every byte written (a zeroed page stays zero
    // with a chance of 2^-32768).
    unsigned char *random = buffer(4096, 0);
    memset(random, 0, 4096);
    evict();
    if (syscall(SYS_getrandom, random, 4096, 0) != 4096)
        fail("syscall(SYS_getrandom)");
    size_t nonzero = 0;
    for (int i = 0; i < 4096; i++)
        nonzero += random[i] != 0;
    if (nonzero == 0)
        fail("getrandom's bytes");
    calls++;

    // Raw futex(2) on an evicted word: the kernel reads it, finds it is not the value
    // expected, and says EAGAIN (EFAULT if it could not read it).
    unsigned *word = (unsigned *)buffer(4096, 0);
    *word = 1;
    evict();
    errno = 0;
    if (syscall(SYS_futex, word, FUTEX_WAIT_PRIVATE, 0, NULL, NULL, 0) != -1 || errno != EAGAIN)
        fail("syscall(SYS_futex)");
    calls++;

    // sendmmsg from evicted buffers and vectors, recvmmsg into evicted ones.
    int s[2];
    if (socketpair(AF_UNIX, SOCK_DGRAM, 0, s))
        fail("socketpair");
    struct mmsghdr *send_msgs = (struct mmsghdr *)buffer(4096, 0);
    struct iovec *send_iovs = (struct iovec *)buffer(4096, 0);
    struct mmsghdr *recv_msgs = (struct mmsghdr *)buffer(4096, 0);
    struct iovec *recv_iovs = (struct iovec *)buffer(4096, 0);
    unsigned char *sent[MSGS], *received[MSGS];
    memset(send_msgs, 0, sizeof *send_msgs * MSGS);
    memset(recv_msgs, 0, sizeof *recv_msgs * MSGS);
    for (int i = 0; i < MSGS; i++) {
        sent[i] = buffer(MSG_BYTES, 11 + i);
        received[i] = buffer(MSG_BYTES, 0);
        send_iovs[i] = (struct iovec){sent[i], MSG_BYTES};
        recv_iovs[i] = (struct iovec){received[i], MSG_BYTES};
        send_msgs[i].msg_hdr.msg_iov = &send_iovs[i];
        send_msgs[i].msg_hdr.msg_iovlen = 1;
        recv_msgs[i].msg_hdr.msg_iov = &recv_iovs[i];
        recv_msgs[i].msg_hdr.msg_iovlen = 1;
    }
    evict();
    if (sendmmsg(s[0], send_msgs, MSGS, 0) != MSGS)
        fail("sendmmsg");
    calls++;
    evict();
    if (recvmmsg(s[1], recv_msgs, MSGS, 0, NULL) != MSGS)
        fail("recvmmsg");
    for (int i = 0; i < MSGS; i++)
        if (recv_msgs[i].msg_len != MSG_BYTES || !same(received[i], MSG_BYTES, 11 + i))
            fail("recvmmsg's messages");
    calls++;

    printf("kernelcalls: %d calls right\n", calls);
    return 0;
}
