/* ws.c — libwebsockets front of pi0-server (see ws.h). One service thread owns every connection;
 * requests go to the engine, whose worker threads wake this thread with lws_cancel_service()
 * (LWS_CALLBACK_EVENT_WAIT_CANCELLED), so /healthz and pings are answered during inference.
 * A client sends no subprotocol, so everything lands on protocols[0] (libwebsockets matches no protocol by name then):
 * its callback serves the websocket, /healthz on LWS_CALLBACK_HTTP, and hands the rest to
 * lws_callback_http_dummy. Per connection: metadata first, then strictly one request at a time
 * (a request sent early is held, with rx flow control off, until the reply is out). Errors follow
 * openpi: a text frame with the reason, then close 1011 (1009 for an oversized message). */
#include "ws.h"

#include <libwebsockets.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "msgnp.h"

#define CLOSE_TRY_AGAIN_LATER 1013   /* IANA's WebSocket close code "Try Again Later" (not in lws 4.1's enum) */

typedef struct conn conn;
struct conn {
    struct lws *wsi;
    uint64_t id;
    conn *next;                 /* the server's list of open websocket connections */
    char peer[96];
    int websocket, healthz;     /* what this wsi is */
    char *metrics;              /* GET /metrics: the body to write */
    uint8_t *rx;                /* message being reassembled */
    size_t rx_len, rx_cap;      /* rx_cap counts in the server's pending bytes */
    int rx_open;                /* a message has begun and not ended (the close waits for its end) */
    double t_rx;                /* when the message being received began */
    uint8_t *held;              /* a whole request that came while another was in flight */
    size_t held_len;
    int busy;                   /* a request of this connection is in the engine */
    engine_job *done;           /* its finished job, to be written */
    float *chunk;               /* its last reply's model-space chunk (real-time chunking's state), or NULL */
    int metadata_sent;
    char *error;                /* to send as a text frame, then close with close_code */
    int close_code, closing;
    int close_handed;           /* the close frame is lws's to send (on_writeable returned -1 after lws_close_reason) */
    double t_open, t_wait;      /* t_wait: when the server started waiting for the current request */
    double prev_total_ms;       /* openpi's server_timing.prev_total_ms of the next reply */
    int have_prev;
    uint64_t n_requests;
    char why[160];              /* how it ended, for the log line */
};

struct ws_server {
    ws_params p;
    srv_backend b;
    struct lws_context *ctx;
    struct lws_protocols protocols[2];
    engine *eng;
    msgnp_buf meta;             /* the metadata message (LWS_PRE headroom) */
    char auth[600];             /* "Api-Key <key>" or "" */
    conn *conns;
    size_t pending;             /* bytes held for incomplete messages, every connection together */
    uint64_t next_id;
    volatile sig_atomic_t stop;
    int draining;
    int closing_all;            /* the stop's last phase: every websocket closes now (ws_server_run) */
    int idle_told;              /* the count last given to engine_set_idle_clients (-1: none yet) */
    lws_sorted_usec_list_t tick;
    int port;
};

/* appends printf output to a growing string (NULL after a failed allocation) */
static void mcat(char **b, size_t *cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void mcat(char **b, size_t *cap, const char *fmt, ...) {
    if (!*b) return;
    size_t len = strlen(*b);
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int k = vsnprintf(*b + len, *cap - len, fmt, ap);
        va_end(ap);
        if (k < 0) { free(*b); *b = NULL; return; }
        if (len + (size_t)k < *cap) return;
        char *g = realloc(*b, *cap * 2 + (size_t)k);
        if (!g) { free(*b); *b = NULL; return; }
        *b = g;
        *cap = *cap * 2 + (size_t)k;
    }
}

static void mhist(char **b, size_t *cap, const char *name, const char *help, const uint64_t *buckets, double sum_ms) {
    mcat(b, cap, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    uint64_t cum = 0;
    for (int i = 0; i < ENGINE_LAT_BUCKETS; i++) {
        cum += buckets[i];
        mcat(b, cap, "%s_bucket{le=\"%g\"} %llu\n", name, engine_lat_bounds[i] / 1e3, (unsigned long long)cum);
    }
    cum += buckets[ENGINE_LAT_BUCKETS];
    mcat(b, cap, "%s_bucket{le=\"+Inf\"} %llu\n%s_sum %.6f\n%s_count %llu\n", name, (unsigned long long)cum, name,
         sum_ms / 1e3, name, (unsigned long long)cum);
}

/* GET /metrics: the server's counters in Prometheus text format (server/README.md lists them) */
static char *metrics_text(ws_server *s) {
    engine_stats es;
    engine_get_stats(s->eng, &es);
    int conns = 0;
    for (conn *c = s->conns; c; c = c->next) conns += c->websocket;
    size_t cap = 8192;
    char *b = calloc(1, cap);
    mcat(&b, &cap, "# HELP pi0_requests_total Requests answered (batch elements count one each).\n"
                   "# TYPE pi0_requests_total counter\npi0_requests_total %llu\n", (unsigned long long)es.requests);
    mcat(&b, &cap, "# HELP pi0_request_errors_total Requests answered with an error.\n"
                   "# TYPE pi0_request_errors_total counter\npi0_request_errors_total %llu\n", (unsigned long long)es.errors);
    mcat(&b, &cap, "# HELP pi0_batches_total Model runs.\n# TYPE pi0_batches_total counter\npi0_batches_total %llu\n",
         (unsigned long long)es.batches);
    mcat(&b, &cap, "# HELP pi0_batch_size Requests per model run.\n# TYPE pi0_batch_size histogram\n");
    static const int le[] = {1, 2, 4, 8, 16, 32, 64, 128, 256};
    uint64_t cum = 0, sum = 0;
    for (int i = 0, n = 1; i < 9; i++) {
        for (; n <= le[i]; n++) { cum += es.batch_sizes[n]; sum += (uint64_t)n * es.batch_sizes[n]; }
        mcat(&b, &cap, "pi0_batch_size_bucket{le=\"%d\"} %llu\n", le[i], (unsigned long long)cum);
    }
    mcat(&b, &cap, "pi0_batch_size_bucket{le=\"+Inf\"} %llu\npi0_batch_size_sum %llu\npi0_batch_size_count %llu\n",
         (unsigned long long)cum, (unsigned long long)sum, (unsigned long long)cum);
    mcat(&b, &cap, "# HELP pi0_queue_depth Requests ready for the model and waiting for a run.\n# TYPE pi0_queue_depth gauge\n"
                   "pi0_queue_depth %d\n", es.queued);
    mcat(&b, &cap, "# HELP pi0_preparing Requests being decoded and prepared.\n# TYPE pi0_preparing gauge\npi0_preparing %d\n",
         es.preparing);
    mcat(&b, &cap, "# HELP pi0_connections Open websocket connections.\n# TYPE pi0_connections gauge\npi0_connections %d\n",
         conns);
    mhist(&b, &cap, "pi0_request_latency_seconds", "From a request's decoding to its reply, queueing included.", es.req_lat,
          es.req_lat_sum);
    mhist(&b, &cap, "pi0_model_latency_seconds", "The model call of a run.", es.run_lat, es.run_lat_sum);
    if (s->b.model)
        mcat(&b, &cap, "# HELP pi0_model_info The model type served.\n# TYPE pi0_model_info gauge\n"
                       "pi0_model_info{model=\"%s\"} 1\n", s->b.model);
    if (s->b.model && !strcmp(s->b.model, "pi0_fast"))
        mcat(&b, &cap, "# HELP pi0_zero_chunks_total Replies whose tokens held no actions: openpi's zero chunk, "
                       "unnormalised.\n# TYPE pi0_zero_chunks_total counter\npi0_zero_chunks_total %llu\n",
             (unsigned long long)es.zero_chunks);
    if (s->b.device_memory) {
        size_t used = 0, total = 0;
        if (s->b.device_memory(s->b.ctx, &used, &total) == 0)
            mcat(&b, &cap, "# HELP pi0_device_memory_bytes Device memory in use and in all (the GPU's).\n"
                           "# TYPE pi0_device_memory_bytes gauge\npi0_device_memory_bytes{kind=\"used\"} %zu\n"
                           "pi0_device_memory_bytes{kind=\"total\"} %zu\n", used, total);
    }
    return b;
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

/* Every line is escaped (msgnp_escape): client-supplied keys and strings reach the log through error messages,
 * and a newline or a terminal escape in them must not forge or hide a line. */
void srv_log(const char *fmt, ...) {
    char line[2048], msg[1800], safe[2048];
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    int k = (int)strftime(line, sizeof line, "%Y-%m-%dT%H:%M:%S", &tm);
    k += snprintf(line + k, sizeof line - k, ".%03ldZ pi0-server: ", ts.tv_nsec / 1000000);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    msgnp_escape(safe, sizeof safe - (size_t)k, msg);
    snprintf(line + k, sizeof line - k, "%s", safe);
    fprintf(stderr, "%s\n", line);
    fflush(stderr);
}

static void lws_log_line(int level, const char *line) {
    (void)level;
    size_t n = strlen(line);
    while (n && (line[n - 1] == '\n' || line[n - 1] == '\r')) n--;
    srv_log("libwebsockets: %.*s", (int)n, line);
}

static conn *find_conn(ws_server *s, uint64_t id) {
    for (conn *c = s->conns; c; c = c->next)
        if (c->id == id) return c;
    return NULL;
}

/* Queues an error for the client (text frame, then close) and logs it. Later input is ignored. When the
 * client is still sending the refused message (oversized, a text frame), the close waits for its end,
 * at most 10 s: closing mid-message would make its send fail before it reads the reason. */
static void conn_error(conn *c, int code, const char *fmt, ...) {
    char raw[1200], msg[1200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(raw, sizeof raw, fmt, ap);
    va_end(ap);
    msgnp_escape(msg, sizeof msg, raw);   /* a text frame must be valid UTF-8; the reason may quote client keys */
    srv_log("conn %llu %s: error: %s", (unsigned long long)c->id, c->peer, msg);
    if (!c->error && !c->closing) {
        c->error = strdup(msg);
        c->close_code = code;
        snprintf(c->why, sizeof c->why, "closed by the server, %d", code);
    }
    if (c->rx_open) lws_set_timeout(c->wsi, PENDING_TIMEOUT_USER_OK, 10);
    lws_callback_on_writable(c->wsi);
}

/* Forgets the message being received (its buffer leaves the pending count). */
static void drop_rx(ws_server *s, conn *c) {
    s->pending -= c->rx_cap;
    free(c->rx);
    c->rx = NULL;
    c->rx_len = c->rx_cap = 0;
}

/* Tells the engine how many connections could send a request soon (engine_set_idle_clients): every open one except
 * those whose request is in the engine, those closing or refused, and all of them while the server drains. A
 * connection whose reply is waiting to go out counts: its robot answers as soon as it has it (the engine also waits
 * while finished jobs have not been taken). Recomputed after every event on the service thread (callback_events). */
static void update_idle(ws_server *s) {
    if (!s || !s->eng) return;   /* lws_context_destroy closes connections after the engine is gone */
    int n = 0;
    if (!s->draining)
        for (const conn *c = s->conns; c; c = c->next)
            n += c->websocket && (!c->busy || c->done) && !c->closing && !c->error;
    if (n != s->idle_told) {   /* (most events, a message's fragments above all, leave it as it was) */
        engine_set_idle_clients(s->eng, n);
        s->idle_told = n;
    }
}

static void submit(ws_server *s, conn *c, uint8_t *msg, size_t len) {
    c->busy = 1;
    float *chunk = NULL;   /* the job's own copy of this connection's last chunk */
    size_t ha = (size_t)s->b.noise_h * s->b.noise_a;
    if (c->chunk && (chunk = malloc(ha * sizeof(float)))) memcpy(chunk, c->chunk, ha * sizeof(float));
    if (engine_submit(s->eng, c->id, msg, len, chunk) != 0) {
        c->busy = 0;
        conn_error(c, LWS_CLOSE_STATUS_UNEXPECTED_CONDITION, "out of memory");
    }
}

/* A whole message arrived. */
static void on_message(ws_server *s, conn *c) {
    uint8_t *msg = c->rx;
    size_t len = c->rx_len;
    s->pending -= c->rx_cap;   /* complete: one per connection at most, bounded by --max-batch and connections */
    c->rx = NULL;
    c->rx_len = c->rx_cap = 0;
    if (s->draining) {
        free(msg);
        conn_error(c, LWS_CLOSE_STATUS_GOINGAWAY, "the server is shutting down");
    } else if (!c->busy && !c->done) {
        submit(s, c, msg, len);
    } else if (!c->held) {
        c->held = msg; /* openpi clients never do this; hold it and stop reading until the reply is out */
        c->held_len = len;
        lws_rx_flow_control(c->wsi, 0);
    } else {
        free(msg);
        conn_error(c, LWS_CLOSE_STATUS_POLICY_VIOLATION, "more than two requests outstanding on one connection");
    }
}

static int on_receive(ws_server *s, conn *c, const void *in, size_t len) {
    struct lws *wsi = c->wsi;
    int last = lws_is_final_fragment(wsi) && !lws_remaining_packet_payload(wsi);
    int starts = !c->rx_open;
    c->rx_open = !last;
    if (starts) c->t_rx = now_ms();
    if (c->error || c->closing) { /* refused: drop the rest, then let the close go out */
        if (last && !c->close_handed) {
            lws_set_timeout(wsi, NO_PENDING_TIMEOUT, 0);
            lws_callback_on_writable(wsi);
        }
        return 0;
    }
    if (starts && !lws_frame_is_binary(wsi)) {
        conn_error(c, LWS_CLOSE_STATUS_UNEXPECTED_CONDITION,
                   "bad request: a text frame; requests are binary frames holding msgpack");
        return 0;
    }
    if (len > s->p.max_message_bytes - c->rx_len) {
        drop_rx(s, c);
        conn_error(c, LWS_CLOSE_STATUS_MESSAGE_TOO_LARGE, "bad request: message larger than %zu bytes (--max-message-bytes)",
                   s->p.max_message_bytes);
        return 0;
    }
    if (c->rx_len + len > c->rx_cap) {
        size_t cap = c->rx_cap ? c->rx_cap : 65536;
        while (cap < c->rx_len + len) cap *= 2;
        if (cap > s->p.max_message_bytes) cap = s->p.max_message_bytes;
        if (cap - c->rx_cap > s->p.max_pending_bytes - s->pending) {   /* a server-wide bound on half-sent data */
            drop_rx(s, c);
            conn_error(c, CLOSE_TRY_AGAIN_LATER, "server busy: incomplete requests would hold more than %zu "
                       "bytes (--max-pending-bytes); try again later", s->p.max_pending_bytes);
            return 0;
        }
        uint8_t *p = realloc(c->rx, cap ? cap : 1);
        if (!p) {
            conn_error(c, LWS_CLOSE_STATUS_UNEXPECTED_CONDITION, "out of memory");
            return 0;
        }
        s->pending += cap - c->rx_cap;
        c->rx = p;
        c->rx_cap = cap;
    }
    if (len) memcpy(c->rx + c->rx_len, in, len);
    c->rx_len += len;
    if (last) {
        if (c->rx_len == 0) {
            conn_error(c, LWS_CLOSE_STATUS_UNEXPECTED_CONDITION, "bad request: empty message");
            return 0;
        }
        on_message(s, c);
    }
    return 0;
}

/* Sends a copy of data[headroom..len) as one frame. */
static int send_frame(struct lws *wsi, const uint8_t *payload, size_t n, enum lws_write_protocol kind) {
    uint8_t *buf = malloc(LWS_PRE + n + 1);
    if (!buf) return -1;
    memcpy(buf + LWS_PRE, payload, n);
    int w = lws_write(wsi, buf + LWS_PRE, n, kind);
    free(buf);
    return w < (int)n ? -1 : 0;
}

static int on_writeable(ws_server *s, conn *c) {
    struct lws *wsi = c->wsi;
    /* lws goes on calling this after the close is handed over (while it waits for the client's answer to its close
     * frame, when the client sends once more, say): a second -1 makes lws drop the connection at once with the
     * client's input unread, which the kernel answers with a reset, and a client that is sending then fails before
     * it reads the close frame. */
    if (c->close_handed) return 0;
    if (c->closing) {
        if (c->rx_open && !s->closing_all) return 0; /* see conn_error; at the stop's end the close goes out now */
        static const char going[] = "server shutting down";
        static const char internal[] = "Internal server error. Reason in the previous frame.";
        const char *r = c->close_code == LWS_CLOSE_STATUS_GOINGAWAY && !c->error ? going : internal;
        lws_close_reason(wsi, (enum lws_close_status)c->close_code, (unsigned char *)r, strlen(r));
        c->close_handed = 1;
        return -1;
    }
    if (!c->metadata_sent) {
        if (send_frame(wsi, s->meta.data + s->meta.headroom, s->meta.len - s->meta.headroom, LWS_WRITE_BINARY))
            return -1;
        c->metadata_sent = 1;
        c->t_wait = now_ms();
        if (c->error || c->done) lws_callback_on_writable(wsi);
        return 0;
    }
    if (c->error) {
        if (send_frame(wsi, (const uint8_t *)c->error, strlen(c->error), LWS_WRITE_TEXT)) return -1;
        free(c->error);
        c->error = NULL;
        c->closing = 1;
        lws_callback_on_writable(wsi);
        return 0;
    }
    if (!c->done) return 0;
    engine_job *j = c->done;
    c->done = NULL;
    c->busy = 0;
    if ((j->error || !j->actions) && !j->n_items) {
        conn_error(c, LWS_CLOSE_STATUS_UNEXPECTED_CONDITION, "%s", j->error ? j->error : "out of memory");
        engine_job_free(j);
        return 0;
    }
    msgnp_buf out;
    pi0_status st;
    if (j->n_items) {   /* a batch request: each element's reply or error, in order */
        msgnp_item *it = calloc((size_t)j->n_items, sizeof *it);
        for (int i = 0; it && i < j->n_items; i++) {
            const engine_job *e = j->items[i];
            it[i] = (msgnp_item){.actions = e && !e->error ? e->actions : NULL, .error = e ? e->error : NULL,
                                 .policy_infer_ms = e ? e->model_ms : 0, .server_infer_ms = e ? e->server_ms : 0};
        }
        st = it ? msgnp_encode_batch_reply(it, j->n_items, s->b.action_horizon, s->b.action_dim, LWS_PRE, &out) : PI0_ERR_NOMEM;
        free(it);
    } else {
        st = msgnp_encode_reply(j->actions, s->b.action_horizon, s->b.action_dim, j->model_ms, j->server_ms,
                                c->have_prev ? &c->prev_total_ms : NULL, LWS_PRE, &out);
    }
    if (j->chunk_out) {   /* the connection's real-time chunking state: this reply's chunk */
        free(c->chunk);
        c->chunk = j->chunk_out;
        j->chunk_out = NULL;
    }
    engine_job_free(j);
    if (st) {
        conn_error(c, LWS_CLOSE_STATUS_UNEXPECTED_CONDITION, "out of memory encoding the reply");
        return 0;
    }
    size_t n = out.len - out.headroom;
    int w = lws_write(wsi, out.data + out.headroom, n, LWS_WRITE_BINARY);
    free(out.data);
    if (w < (int)n) return -1;
    double t = now_ms();
    c->prev_total_ms = t - c->t_wait; /* openpi: from waiting for the request to its reply sent */
    c->have_prev = 1;
    c->t_wait = t;
    c->n_requests++;
    if (c->held) {
        uint8_t *m = c->held;
        c->held = NULL;
        submit(s, c, m, c->held_len);
        lws_rx_flow_control(wsi, 1);
    }
    return 0;
}

/* Finished jobs from the engine go to their connections (or are dropped if those have closed). */
static void collect(ws_server *s) {
    engine_job *j = engine_take_done(s->eng);
    while (j) {
        engine_job *next = j->next;
        j->next = NULL;
        conn *c = find_conn(s, j->conn_id);
        if (c && !c->closing && !c->error) {
            c->done = j;
            lws_callback_on_writable(c->wsi);
        } else {
            engine_job_free(j);
        }
        j = next;
    }
}

/* Constant-time comparison of the Authorization header with "Api-Key <key>". */
static int authorized(ws_server *s, struct lws *wsi) {
    if (!s->auth[0]) return 1;
    char got[sizeof s->auth];
    int n = lws_hdr_total_length(wsi, WSI_TOKEN_HTTP_AUTHORIZATION);
    if (n <= 0 || n >= (int)sizeof got) return 0;
    if (lws_hdr_copy(wsi, got, sizeof got, WSI_TOKEN_HTTP_AUTHORIZATION) != n) return 0;
    size_t want = strlen(s->auth);
    if ((size_t)n != want) return 0;
    unsigned diff = 0;
    for (size_t i = 0; i < want; i++) diff |= (unsigned char)got[i] ^ (unsigned char)s->auth[i];
    return diff == 0;
}

static void peer_name(struct lws *wsi, char *out, size_t cap) {
    char ip[64] = "?", fwd[64] = "";
    lws_get_peer_simple(wsi, ip, sizeof ip);
    if (lws_hdr_total_length(wsi, WSI_TOKEN_X_FORWARDED_FOR) > 0)
        lws_hdr_copy(wsi, fwd, sizeof fwd, WSI_TOKEN_X_FORWARDED_FOR);
    snprintf(out, cap, "%s%s%s", fwd[0] ? fwd : ip, fwd[0] ? " via " : "", fwd[0] ? ip : "");
}

static int callback_event(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in, size_t len);

/* Every event, then the engine's count of connections that could send (update_idle): one place, so that no path that
 * opens, submits, answers, refuses or closes a connection can leave the count stale. */
static int callback(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in, size_t len) {
    int r = callback_event(wsi, reason, user, in, len);
    switch (reason) {
    case LWS_CALLBACK_ESTABLISHED: case LWS_CALLBACK_RECEIVE: case LWS_CALLBACK_SERVER_WRITEABLE:
    case LWS_CALLBACK_CLOSED: case LWS_CALLBACK_EVENT_WAIT_CANCELLED: {
        struct lws_context *ctx = lws_get_context(wsi);
        update_idle(ctx ? lws_context_user(ctx) : NULL);
        break;
    }
    default:
        break;
    }
    return r;
}

static int callback_event(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in, size_t len) {
    struct lws_context *ctx = lws_get_context(wsi);
    ws_server *s = ctx ? lws_context_user(ctx) : NULL;
    conn *c = user;
    switch (reason) {
    case LWS_CALLBACK_EVENT_WAIT_CANCELLED:
        if (s && s->eng) collect(s);
        return 0;

    case LWS_CALLBACK_HTTP:
        if (in && strcmp((const char *)in, "/metrics") == 0 && c && s) {   /* Prometheus text format, no API key */
            uint8_t buf[LWS_PRE + 512], *start = buf + LWS_PRE, *p = start, *end = buf + sizeof buf - 1;
            c->metrics = metrics_text(s);
            if (!c->metrics || lws_add_http_common_headers(wsi, HTTP_STATUS_OK, "text/plain; version=0.0.4",
                                                           (lws_filepos_t)strlen(c->metrics), &p, end) ||
                lws_finalize_write_http_header(wsi, start, &p, end))
                return 1;
            lws_callback_on_writable(wsi);
            return 0;
        }
        if (in && strcmp((const char *)in, "/healthz") == 0) {
            uint8_t buf[LWS_PRE + 512], *start = buf + LWS_PRE, *p = start, *end = buf + sizeof buf - 1;
            if (lws_add_http_common_headers(wsi, HTTP_STATUS_OK, "text/plain", 3, &p, end) ||
                lws_finalize_write_http_header(wsi, start, &p, end))
                return 1;
            if (!c) return 1;
            c->healthz = 1;
            lws_callback_on_writable(wsi);
            return 0;
        }
        break;
    case LWS_CALLBACK_HTTP_WRITEABLE:
        if (c && c->metrics) {
            size_t n = strlen(c->metrics);
            uint8_t *body = malloc(LWS_PRE + n + 1);
            int w = body ? (memcpy(body + LWS_PRE, c->metrics, n), lws_write(wsi, body + LWS_PRE, n, LWS_WRITE_HTTP_FINAL)) : -1;
            free(body);
            free(c->metrics);
            c->metrics = NULL;
            if (w != (int)n) return 1;
            return lws_http_transaction_completed(wsi) ? -1 : 0;
        }
        if (c && c->healthz) {
            uint8_t body[LWS_PRE + 3];
            memcpy(body + LWS_PRE, "OK\n", 3);
            c->healthz = 0;
            if (lws_write(wsi, body + LWS_PRE, 3, LWS_WRITE_HTTP_FINAL) != 3) return 1;
            return lws_http_transaction_completed(wsi) ? -1 : 0;
        }
        break;
    /* The end of an HTTP transaction however it ends (reply written, client gone before it, context destroyed): lws
     * calls this with the per-session data still valid and frees that data right after, on a close and also when it
     * binds the connection anew (a keep-alive connection's next request, a websocket upgrade), where
     * LWS_CALLBACK_CLOSED_HTTP does not come. LWS_CALLBACK_CLOSED below is for websockets only. */
    case LWS_CALLBACK_HTTP_DROP_PROTOCOL:
        if (c) {
            free(c->metrics);
            c->metrics = NULL;
            c->healthz = 0;
        }
        break;

    case LWS_CALLBACK_FILTER_PROTOCOL_CONNECTION:
        if (!authorized(s, wsi)) {
            char peer[96];
            peer_name(wsi, peer, sizeof peer);
            srv_log("refused %s: %s API key", peer,
                    lws_hdr_total_length(wsi, WSI_TOKEN_HTTP_AUTHORIZATION) > 0 ? "wrong" : "no");
            /* written raw: lws_return_http_status answers an upgrade request as HTTP/1.0, which the
             * websockets client (openpi-client) rejects as an invalid response instead of a 401 */
            static const char resp[] = "HTTP/1.1 401 Unauthorized\r\nContent-Type: text/plain\r\n"
                                       "Content-Length: 36\r\nConnection: close\r\n\r\n"
                                       "expected Authorization: Api-Key KEY\n";
            uint8_t buf[LWS_PRE + sizeof resp];
            memcpy(buf + LWS_PRE, resp, sizeof resp - 1);
            lws_write(wsi, buf + LWS_PRE, sizeof resp - 1, LWS_WRITE_RAW);
            return 1;
        }
        return 0;

    case LWS_CALLBACK_ESTABLISHED:
        memset(c, 0, sizeof *c);
        c->wsi = wsi;
        c->websocket = 1;
        c->id = ++s->next_id;
        c->t_open = c->t_wait = now_ms();
        peer_name(wsi, c->peer, sizeof c->peer);
        snprintf(c->why, sizeof c->why, "connection lost");
        c->next = s->conns;
        s->conns = c;
        if (s->draining) conn_error(c, LWS_CLOSE_STATUS_GOINGAWAY, "the server is shutting down");
        lws_callback_on_writable(wsi);
        return 0;

    case LWS_CALLBACK_RECEIVE:
        return on_receive(s, c, in, len);

    case LWS_CALLBACK_SERVER_WRITEABLE:
        return on_writeable(s, c);

    case LWS_CALLBACK_WS_PEER_INITIATED_CLOSE:
        if (len >= 2) {
            const uint8_t *b = in;
            snprintf(c->why, sizeof c->why, "closed by the client, %d", b[0] << 8 | b[1]);
        } else {
            snprintf(c->why, sizeof c->why, "closed by the client");
        }
        return 0;

    case LWS_CALLBACK_CLOSED:
        if (!c || !c->websocket) return 0;
        for (conn **pp = &s->conns; *pp; pp = &(*pp)->next)
            if (*pp == c) { *pp = c->next; break; }
        srv_log("conn %llu %s: %llu requests in %.1f s, %s%s", (unsigned long long)c->id, c->peer,
                (unsigned long long)c->n_requests, (now_ms() - c->t_open) / 1e3, c->why,
                c->busy ? " (a request was in flight; its reply is dropped)" : "");
        drop_rx(s, c);
        free(c->held);
        free(c->error);
        engine_job_free(c->done);
        free(c->chunk);
        memset(c, 0, sizeof *c);
        return 0;

    default:
        break;
    }
    return lws_callback_http_dummy(wsi, reason, user, in, len);
}

static void engine_notify(void *user) {
    ws_server *s = user;
    if (s->ctx) lws_cancel_service(s->ctx);
}

pi0_status ws_server_create(ws_server **out, const ws_params *p, const srv_backend *b, const engine_params *ep,
                            char *err, size_t errlen) {
    *out = NULL;
    ws_server *s = calloc(1, sizeof *s);
    if (!s) { snprintf(err, errlen, "out of memory"); return PI0_ERR_NOMEM; }
    s->idle_told = -1;
    s->p = *p;
    s->b = *b;
    if (!s->p.max_message_bytes) s->p.max_message_bytes = (size_t)64 << 20;
    if (!s->p.max_pending_bytes) s->p.max_pending_bytes = (size_t)256 << 20;
    if (!(s->p.message_timeout_s > 0)) s->p.message_timeout_s = 30;
    if (s->p.drain_s <= 0) s->p.drain_s = 30;
    if (p->api_key) {
        if (!p->api_key[0] || strlen(p->api_key) > 512 || strpbrk(p->api_key, "\r\n")) {
            snprintf(err, errlen, "--api-key: expected 1 to 512 characters without line breaks");
            free(s);
            return PI0_ERR_ARG;
        }
        snprintf(s->auth, sizeof s->auth, "Api-Key %s", p->api_key);
    }
    pi0_status st = msgnp_encode_metadata(b->metadata_json, LWS_PRE, &s->meta, err, errlen);
    if (st) { free(s); return st; }

    lws_set_log_level(LLL_ERR, lws_log_line);
    s->protocols[0] = (struct lws_protocols){
        .name = "openpi", .callback = callback, .per_session_data_size = sizeof(conn),
        .rx_buffer_size = 65536,
    };
    struct lws_context_creation_info info;
    memset(&info, 0, sizeof info);
    const char *host = p->host;
    info.port = p->port;
    info.iface = host && host[0] && strcmp(host, "0.0.0.0") != 0 ? host : NULL;
    info.options = host && strchr(host, ':') ? 0 : LWS_SERVER_OPTION_DISABLE_IPV6;
    info.protocols = s->protocols;
    info.user = s;
    info.max_http_header_data = 4096;
    /* Dead peers are found by TCP keepalive (60 s idle, then 3 probes 10 s apart). Not by lws's
     * retry_and_idle_policy: with it (ping 20 s, hangup 60 s) lws 4.1 dropped idle openpi-clients
     * after 60 s although they answered, a regression from openpi's server. Pings from clients
     * (the websockets library sends one every 20 s) are answered at any time. */
    info.ka_time = 60;
    info.ka_probes = 3;
    info.ka_interval = 10;
    info.server_string = "pi0-server";
    s->ctx = lws_create_context(&info);
    if (!s->ctx) {
        snprintf(err, errlen, "cannot listen on %s:%d (address in use or not available?)", host ? host : "0.0.0.0", p->port);
        free(s->meta.data);
        free(s);
        return PI0_ERR_IO;
    }
    struct lws_vhost *vh = lws_get_vhost_by_name(s->ctx, "default");
    s->port = vh ? lws_get_vhost_listen_port(vh) : p->port;
    engine_params e = *ep;
    e.notify = engine_notify;
    e.notify_user = s;
    st = engine_create(&s->eng, b, &e);
    if (st) {
        snprintf(err, errlen, "cannot start the worker threads");
        ws_server_free(s);
        return st;
    }
    *out = s;
    return PI0_OK;
}

int ws_server_port(const ws_server *s) { return s->port; }

void ws_server_stop(ws_server *s) {
    s->stop = 1;
    if (s->ctx) lws_cancel_service(s->ctx);
}

/* Every 100 ms: messages incomplete for longer than --message-timeout-s are refused (a client that trickles a
 * byte a second would otherwise hold its connection and buffer forever); the close is not delayed for them. */
static void tick(lws_sorted_usec_list_t *sul) {
    ws_server *s = lws_container_of(sul, ws_server, tick);
    double t = now_ms();
    for (conn *c = s->conns; c; c = c->next)
        if (c->rx_open && !c->error && !c->closing && t - c->t_rx > s->p.message_timeout_s * 1e3) {
            drop_rx(s, c);
            c->rx_open = 0;
            conn_error(c, LWS_CLOSE_STATUS_POLICY_VIOLATION, "bad request: message still incomplete after %g s "
                       "(--message-timeout-s)", s->p.message_timeout_s);
        }
    lws_sul_schedule(s->ctx, 0, &s->tick, tick, 100 * LWS_US_PER_MS);
}

static int unsent_replies(ws_server *s) {
    int n = 0;
    for (conn *c = s->conns; c; c = c->next) n += c->done != NULL || c->held != NULL;
    return n;
}

void ws_server_run(ws_server *s) {
    tick(&s->tick);
    while (!s->stop)
        if (lws_service(s->ctx, 0) < 0) break;
    /* Graceful stop: refuse new requests, answer those in flight, then close every connection. */
    s->draining = 1;
    int n = engine_pending(s->eng);
    srv_log("stopping: %d request%s in flight", n, n == 1 ? "" : "s");
    double until = now_ms() + s->p.drain_s * 1e3;
    while ((engine_pending(s->eng) > 0 || unsent_replies(s) > 0) && now_ms() < until)
        if (lws_service(s->ctx, 0) < 0) break;
    /* Every websocket gets its close frame now, one in the middle of sending a message too (unlike an error's close,
     * see conn_error, this one does not wait for the message's end), and its client 2 s to answer;
     * lws_context_destroy drops those that do not. */
    s->closing_all = 1;
    for (conn *c = s->conns; c; c = c->next) {
        if (!c->error && !c->closing) snprintf(c->why, sizeof c->why, "closed by the server, 1001 (shutting down)");
        c->closing = 1;
        if (!c->close_code) c->close_code = LWS_CLOSE_STATUS_GOINGAWAY;
        lws_callback_on_writable(c->wsi);
    }
    until = now_ms() + 2e3;
    while (s->conns && now_ms() < until)
        if (lws_service(s->ctx, 0) < 0) break;
    lws_sul_cancel(&s->tick);
}

void ws_server_get_stats(ws_server *s, engine_stats *st) { engine_get_stats(s->eng, st); }

void ws_server_free(ws_server *s) {
    if (!s) return;
    engine_free(s->eng); /* first: its threads may still call lws_cancel_service */
    s->eng = NULL;
    if (s->ctx) lws_context_destroy(s->ctx);
    free(s->meta.data);
    free(s);
}
