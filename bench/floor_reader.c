/* The floor of a fan-out node at agent rates, without the gateway: bench/floor.py.
 *
 * Subscribes to channels f0..f<feeds-1> of a redis-server and writes every message's
 * payload, as it is, to the <subs> sink connections of its feed: one write(2) per
 * delivery, as a gateway that encodes once and writes each subscriber's socket.  No
 * cursors, no framing, no checks: what is left is the kernel's part (epoll, the read,
 * the writes over loopback) and the least a program can do around it.
 *
 * With hold_us > 0, after each read that brought messages the socket is not watched
 * for hold_us microseconds (what is published meanwhile waits in the kernel) and is
 * then read at once, without a poll first: the gateway's hold, at its cheapest.
 *
 * usage: floor_reader <redis port> <sink port> <feeds> <subs> <hold_us>
 * Prints "ready" once every subscription is confirmed; on SIGTERM prints
 * "messages <n> reads <n>" and exits.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t stopping = 0;
static void on_term(int sig) { (void)sig; stopping = 1; }

static char buf[1 << 20];
static size_t have = 0;
static long messages = 0, reads = 0, confirmed = 0;
static int *sinks;
static int feeds, subs;

static void die(const char *what) { perror(what); exit(1); }

static int connect_to(int port) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) die("socket");
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_port = htons((unsigned short)port);
    a.sin_addr.s_addr = htonl(0x7f000001);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) < 0) die("connect");
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
}

static void send_all(int fd, const char *data, size_t len) {
    while (len) {
        ssize_t n = write(fd, data, len);
        if (n < 0) die("write");
        data += n;
        len -= (size_t)n;
    }
}

/* One element of a reply array: a bulk string or an integer.  Returns the position
 * after it, or NULL if the buffer does not hold all of it yet. */
static const char *element(const char *p, const char *end, const char **data, long *len) {
    if (p >= end) return NULL;
    const char *nl = memchr(p, '\n', (size_t)(end - p));
    if (!nl) return NULL;
    if (*p == ':') { *data = p + 1; *len = 0; return nl + 1; }
    if (*p != '$') { fprintf(stderr, "unexpected reply byte %c\n", *p); exit(1); }
    long n = strtol(p + 1, NULL, 10);
    const char *d = nl + 1;
    if (end - d < n + 2) return NULL;
    *data = d;
    *len = n;
    return d + n + 2;
}

/* Every complete push in the buffer: a message is written to its feed's sinks. */
static void consume(void) {
    const char *p = buf, *end = buf + have;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        if (!nl) break;
        if (*p != '*') { fprintf(stderr, "unexpected reply\n"); exit(1); }
        const char *q = nl + 1, *kind, *channel, *payload;
        long kind_len, channel_len, payload_len;
        if (!(q = element(q, end, &kind, &kind_len))) break;
        if (!(q = element(q, end, &channel, &channel_len))) break;
        if (!(q = element(q, end, &payload, &payload_len))) break;
        if (kind_len == 7 && memcmp(kind, "message", 7) == 0) {
            long feed = strtol(channel + 1, NULL, 10);
            for (int s = 0; s < subs; s++) send_all(sinks[feed * subs + s], payload, (size_t)payload_len);
            messages++;
        } else if (kind_len == 9 && memcmp(kind, "subscribe", 9) == 0) {
            confirmed++;
        }
        p = q;
    }
    size_t left = (size_t)(end - p);
    memmove(buf, p, left);
    have = left;
}

/* One read (as libuv: another only if it filled the buffer); 0 when nothing was there. */
static ssize_t read_some(int fd) {
    ssize_t total = 0;
    for (;;) {
        size_t room = sizeof buf - have;
        ssize_t n = read(fd, buf + have, room);
        if (n < 0) {
            if (errno == EAGAIN || errno == EINTR) return total;
            die("read");
        }
        if (n == 0) { fprintf(stderr, "redis closed the connection\n"); exit(1); }
        reads++;
        have += (size_t)n;
        total += n;
        consume();
        if ((size_t)n < room) return total;
    }
}

int main(int argc, char **argv) {
    if (argc != 6) { fprintf(stderr, "usage: %s redis_port sink_port feeds subs hold_us\n", argv[0]); return 2; }
    int redis_port = atoi(argv[1]), sink_port = atoi(argv[2]);
    feeds = atoi(argv[3]);
    subs = atoi(argv[4]);
    long hold_us = atol(argv[5]);
    signal(SIGTERM, on_term);
    signal(SIGPIPE, SIG_IGN);

    sinks = calloc((size_t)feeds * (size_t)subs, sizeof *sinks);
    for (int i = 0; i < feeds * subs; i++) sinks[i] = connect_to(sink_port);
    int r = connect_to(redis_port);

    for (int start = 0; start < feeds; start += 1000) {
        int n = feeds - start < 1000 ? feeds - start : 1000;
        char cmd[64 * 1024];
        size_t len = (size_t)snprintf(cmd, sizeof cmd, "*%d\r\n$9\r\nSUBSCRIBE\r\n", n + 1);
        for (int k = start; k < start + n; k++) {
            char name[32];
            int nl = snprintf(name, sizeof name, "f%d", k);
            len += (size_t)snprintf(cmd + len, sizeof cmd - len, "$%d\r\n%s\r\n", nl, name);
        }
        send_all(r, cmd, len);
    }
    while (confirmed < feeds) {
        ssize_t n = read(r, buf + have, sizeof buf - have);
        if (n <= 0) die("read confirmations");
        have += (size_t)n;
        consume();
    }
    fcntl(r, F_SETFL, fcntl(r, F_GETFL) | O_NONBLOCK);
    messages = reads = 0;
    printf("ready\n");
    fflush(stdout);

    int ep = epoll_create1(0);
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = r};
    if (epoll_ctl(ep, EPOLL_CTL_ADD, r, &ev) < 0) die("epoll_ctl");
    struct timespec hold = {.tv_sec = hold_us / 1000000, .tv_nsec = (hold_us % 1000000) * 1000};
    while (!stopping) {
        struct epoll_event out;
        int n = epoll_wait(ep, &out, 1, -1);
        if (n < 0) {
            if (errno == EINTR) continue;
            die("epoll_wait");
        }
        if (read_some(r) <= 0 || hold_us <= 0) continue;
        /* Hold: stop watching, sleep, read at once; watch again when a read is empty. */
        epoll_ctl(ep, EPOLL_CTL_DEL, r, NULL);
        do {
            nanosleep(&hold, NULL);
        } while (!stopping && read_some(r) > 0);
        epoll_ctl(ep, EPOLL_CTL_ADD, r, &ev);
    }
    printf("messages %ld reads %ld\n", messages, reads);
    return 0;
}
