/* wsclient.h — a minimal blocking RFC 6455 client over plain sockets for test_server.c: just enough to
 * speak openpi's protocol to the server and to misbehave on purpose (text frames, fragments, half
 * frames, garbage, hanging up mid-request). Every socket has a 10 s receive timeout so a bug shows as
 * a failed check, not a hung test. Not a general client: no TLS, no extensions, server frames must be
 * unfragmented (lws sends each message as one frame). */
#ifndef PI0_TEST_WSCLIENT_H
#define PI0_TEST_WSCLIENT_H

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

static int tcp_connect(int port) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return -1;
    struct timeval tv = {10, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0) { close(fd); return -1; }
    return fd;
}

static int send_all(int fd, const void *p, size_t n) {
    const uint8_t *b = p;
    while (n) {
        ssize_t w = send(fd, b, n, MSG_NOSIGNAL);
        if (w <= 0) return -1;
        b += w;
        n -= (size_t)w;
    }
    return 0;
}

static int recv_all(int fd, void *p, size_t n) {
    uint8_t *b = p;
    while (n) {
        ssize_t r = recv(fd, b, n, 0);
        if (r <= 0) return -1;
        b += r;
        n -= (size_t)r;
    }
    return 0;
}

/* Reads an HTTP response head (up to the blank line) into buf; returns the status code or -1. */
static int http_head(int fd, char *buf, size_t cap) {
    size_t n = 0;
    while (n + 1 < cap) {
        if (recv(fd, buf + n, 1, 0) != 1) break;
        n++;
        if (n >= 4 && memcmp(buf + n - 4, "\r\n\r\n", 4) == 0) break;
    }
    buf[n] = 0;
    int code;
    return sscanf(buf, "HTTP/1.1 %d", &code) == 1 ? code : -1; /* websockets refuses HTTP/1.0 */
}

/* GET path; returns the status and copies up to cap-1 body bytes (Content-Length bodies). */
static int http_get(int port, const char *path, char *body, size_t cap) {
    int fd = tcp_connect(port);
    if (fd < 0) return -1;
    char req[256], head[4096];
    snprintf(req, sizeof req, "GET %s HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n", path);
    int code = send_all(fd, req, strlen(req)) ? -1 : http_head(fd, head, sizeof head);
    if (body && cap) {
        body[0] = 0;
        const char *cl = strcasestr(head, "content-length:");
        size_t len = cl ? strtoul(cl + 15, NULL, 10) : 0;
        if (len >= cap) len = cap - 1;
        if (len && recv_all(fd, body, len) == 0) body[len] = 0;
    }
    close(fd);
    return code;
}

/* Opens a websocket; extra = additional header lines ("Authorization: ...\r\n") or NULL.
 * Returns the socket, or -1 with *status = the HTTP status the server answered (or -1). */
static int ws_open(int port, const char *extra, int *status) {
    int fd = tcp_connect(port), code = -1;
    if (fd >= 0) {
        char req[1024], head[4096];
        snprintf(req, sizeof req,
                 "GET / HTTP/1.1\r\nHost: localhost\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                 "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n%s\r\n",
                 extra ? extra : "");
        code = send_all(fd, req, strlen(req)) ? -1 : http_head(fd, head, sizeof head);
    }
    if (status) *status = code;
    if (code != 101 && fd >= 0) { close(fd); fd = -1; }
    return fd;
}

/* Sends one masked frame. fin = 0 starts or continues a fragmented message. */
static int ws_send_frame(int fd, int opcode, int fin, const void *data, size_t len) {
    uint8_t h[14];
    size_t k = 0;
    h[k++] = (uint8_t)((fin ? 0x80 : 0) | opcode);
    if (len < 126) h[k++] = (uint8_t)(0x80 | len);
    else if (len < 65536) { h[k++] = 0x80 | 126; h[k++] = (uint8_t)(len >> 8); h[k++] = (uint8_t)len; }
    else { h[k++] = 0x80 | 127; for (int i = 7; i >= 0; i--) h[k++] = (uint8_t)((uint64_t)len >> (8 * i)); }
    static const uint8_t mask[4] = {0x12, 0x34, 0x56, 0x78};
    memcpy(h + k, mask, 4);
    k += 4;
    uint8_t *m = malloc(len + 1);
    if (!m) return -1;
    for (size_t i = 0; i < len; i++) m[i] = ((const uint8_t *)data)[i] ^ mask[i & 3];
    int r = send_all(fd, h, k) || send_all(fd, m, len) ? -1 : 0;
    free(m);
    return r;
}

static int ws_send(int fd, int opcode, const void *data, size_t len) { return ws_send_frame(fd, opcode, 1, data, len); }

/* Receives one frame: returns its opcode (1 text, 2 binary, 8 close, 9 ping, 10 pong) or -1;
 * *data (malloc'd, NUL-terminated) and *len get the payload. */
static int ws_recv(int fd, uint8_t **data, size_t *len) {
    uint8_t h[2];
    *data = NULL;
    *len = 0;
    if (recv_all(fd, h, 2)) return -1;
    uint64_t n = h[1] & 0x7f;
    if (n == 126) { uint8_t e[2]; if (recv_all(fd, e, 2)) return -1; n = (uint64_t)e[0] << 8 | e[1]; }
    else if (n == 127) {
        uint8_t e[8];
        if (recv_all(fd, e, 8)) return -1;
        n = 0;
        for (int i = 0; i < 8; i++) n = n << 8 | e[i];
    }
    if (n > (1u << 30)) return -1;
    uint8_t *b = malloc(n + 1);
    if (!b || recv_all(fd, b, n)) { free(b); return -1; }
    b[n] = 0;
    *data = b;
    *len = n;
    return h[0] & 0x0f;
}

/* Close code of a close frame's payload (or 1005 when it has none). */
static int close_code(const uint8_t *p, size_t n) { return n >= 2 ? p[0] << 8 | p[1] : 1005; }

#endif
