/* ws.h — the network side of pi0-server on libwebsockets 4.1: openpi's websocket protocol
 * (docs/protocol.md 1-3, 6, 7), GET /healthz, the Api-Key check at the handshake, one
 * log line per connection and per error, and the graceful stop. Inference lives in engine.h. */
#ifndef PI0_SERVER_WS_H
#define PI0_SERVER_WS_H

#include <stddef.h>

#include "engine.h"
#include "pi0.h"

typedef struct {
    const char *host;              /* address to bind; NULL, "" or "0.0.0.0" = every interface (openpi's default) */
    int port;                      /* 0 = a free port chosen by the kernel (ws_server_port says which) */
    const char *api_key;           /* NULL = open; else "Authorization: Api-Key <key>" is required */
    size_t max_message_bytes;      /* larger requests get an error and close 1009; 0 = 64 MiB */
    size_t max_pending_bytes;      /* all connections' incomplete messages together; a message that would pass it
                                      gets an error and close 1013 (try again later); 0 = 256 MiB */
    double message_timeout_s;      /* a message still incomplete after this gets an error and close 1008; 0 = 30 s */
    double drain_s;                /* on stop, how long in-flight requests may take; 0 = 30 s */
} ws_params;

typedef struct ws_server ws_server;

/* Binds the port and starts the engine over backend b. err gets the reason on failure. */
pi0_status ws_server_create(ws_server **out, const ws_params *p, const srv_backend *b, const engine_params *ep,
                            char *err, size_t errlen);
int ws_server_port(const ws_server *s);
/* Serves on the calling thread until ws_server_stop; then answers the requests already received,
 * closes every connection with 1001 and returns. */
void ws_server_run(ws_server *s);
/* Asks ws_server_run to stop. Thread-safe and async-signal-safe (a flag and lws_cancel_service). */
void ws_server_stop(ws_server *s);
void ws_server_free(ws_server *s);
void ws_server_get_stats(ws_server *s, engine_stats *st);

/* One line on stderr: "2026-11-22T04:54:00.123Z pi0-server: ...". Thread-safe. */
void srv_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
