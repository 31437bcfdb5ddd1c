/* engine.c — decode/prepare threads, the batching worker and the queues between them (see engine.h).
 * One mutex guards the three queues (prepare -> run -> done); it is held only to link and unlink jobs.
 * Dynamic batching: the worker takes the first prepared request, then waits up to batch_window_ms for
 * more until max_batch are queued, and runs them as one pi0_policy_run. Worker threads start with all
 * signals blocked, so SIGINT/SIGTERM reach the service thread. */
#include "engine.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "msgnp.h"

#define MAX_PREP_THREADS 8

struct engine {
    srv_backend b;
    engine_params p;
    pthread_mutex_t mu;
    pthread_cond_t prep_cv, run_cv;
    engine_job *prep_head, *prep_tail, *run_head, *run_tail, *done_head, *done_tail;
    int n_run_queued, pending, stop;
    int n_preparing;                 /* requests popped by a prepare thread and not yet queued for the worker or done */
    int idle_clients;                /* connections that could still send a request (engine_set_idle_clients); -1 =
                                        unknown: the batch window always runs */
    uint64_t seed;
    engine_stats stats;
    pthread_t prep[MAX_PREP_THREADS], worker;
    int n_prep, worker_started;
};

const double engine_lat_bounds[ENGINE_LAT_BUCKETS] = {5, 10, 15, 20, 30, 50, 75, 100, 150, 250, 500, 1000, 2500, 10000};

static int lat_bucket(double ms) {
    int b = 0;
    while (b < ENGINE_LAT_BUCKETS && ms > engine_lat_bounds[b]) b++;
    return b;
}

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

static void push(engine_job **head, engine_job **tail, engine_job *j) {
    j->next = NULL;
    if (*tail) (*tail)->next = j;
    else *head = j;
    *tail = j;
}

static engine_job *pop(engine_job **head, engine_job **tail) {
    engine_job *j = *head;
    if (j) {
        *head = j->next;
        if (!*head) *tail = NULL;
        j->next = NULL;
    }
    return j;
}

/* Hands finished jobs (a NULL-terminated chain) to the service thread. */
static void finish(engine *e, engine_job *chain) {
    pthread_mutex_lock(&e->mu);
    for (engine_job *j = chain, *next; j; j = next) {
        next = j->next;
        e->stats.requests++;
        if (j->error) e->stats.errors++;
        if (!j->error) {
            e->stats.req_lat[lat_bucket(j->server_ms)]++;
            e->stats.req_lat_sum += j->server_ms;
        }
        engine_job *p = j->parent;
        if (p) {   /* an element: it waits in its request, which is done with its last element */
            j->next = NULL;
            p->items[j->index] = j;
            if (--p->remaining == 0) push(&e->done_head, &e->done_tail, p);
        } else {
            push(&e->done_head, &e->done_tail, j);
        }
    }
    pthread_mutex_unlock(&e->mu);
    if (e->p.notify) e->p.notify(e->p.notify_user);
}

/* The prepare thread's hold on a batch request ends (its elements may all have finished already). */
static void release_batch(engine *e, engine_job *p) {
    pthread_mutex_lock(&e->mu);
    int done = --p->remaining == 0;
    if (done) push(&e->done_head, &e->done_tail, p);
    pthread_mutex_unlock(&e->mu);
    if (done && e->p.notify) e->p.notify(e->p.notify_user);
}

/* Out of memory leaves both error and actions NULL; the service thread reports that case itself. */
static void set_error(engine_job *j, const char *what, const char *msg) {
    size_t n = strlen(what) + strlen(msg) + 3;
    j->error = malloc(n);
    if (j->error) snprintf(j->error, n, "%s: %s", what, msg);
}

static uint64_t splitmix(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Real-time chunking for one request: the leftover is the request's own prev_chunk, else the connection's last
 * chunk after the rows the robot executed; the rest from the request or the server's defaults. A connection's
 * first request has no chunk to guide towards: it runs unguided. */
static int rtc_request(engine *e, const engine_job *j, msgnp_request *req, pi0_rtc_request *rtc, char *err, size_t errlen) {
    int H = e->b.noise_h, A = e->b.noise_a, ex = req->rtc_executed < 0 ? 0 : req->rtc_executed;
    *rtc = (pi0_rtc_request){0};
    if (req->rtc_prev) {
        rtc->prev = req->rtc_prev;
        rtc->n_prev = req->rtc_n_prev;
    } else if (j->chunk_in) {
        if (ex > H) {
            snprintf(err, errlen, "rtc.executed %d: the previous chunk has %d rows", ex, H);
            return 0;
        }
        rtc->prev = j->chunk_in + (size_t)ex * A;
        rtc->n_prev = H - ex;
    }
    rtc->delay = req->rtc_delay >= 0 ? req->rtc_delay : 0;
    rtc->horizon = req->rtc_horizon >= 0 ? req->rtc_horizon : e->p.rtc_horizon > 0 ? e->p.rtc_horizon : 10;
    rtc->schedule = req->rtc_schedule >= 0 ? (pi0_rtc_schedule)req->rtc_schedule
                  : e->p.rtc_schedule_set ? e->p.rtc_schedule : PI0_RTC_LINEAR;
    rtc->max_weight = req->rtc_max_weight > 0 ? (float)req->rtc_max_weight : e->p.rtc_max_weight;
    rtc->mode = req->rtc_mode >= 0 ? (pi0_rtc_mode)req->rtc_mode : e->p.rtc_mode;
    req->obs.rtc = rtc;
    return 1;
}

/* Decoded, prepared and queued like a request: a batch element, or a plain request (parent NULL). Returns 1 when
 * queued for the worker; otherwise j carries the error and the caller finishes it. */
static int prepare_one(engine *e, engine_job *j, msgnp_request *req, uint64_t seed, char *err, size_t errlen) {
    pi0_rtc_request rtc;
    if (req->has_rtc && !rtc_request(e, j, req, &rtc, err, errlen)) {
        set_error(j, "bad request", err);
        return 0;
    }
    req->obs.seed = seed;
    if (e->b.prepare(e->b.ctx, &req->obs, &j->prepared, err, errlen) == 0) return 1;
    for (int k = 0; k < req->n_unread; k++) {   /* "missing 'state'" when state came as a string */
        char quoted[MSGNP_MAX_KEY + 2];
        snprintf(quoted, sizeof quoted, "'%s'", req->unread[k]);
        size_t n = strlen(err);
        if (strstr(err, quoted))
            snprintf(err + n, errlen - n, " (%s was sent as a %s; expected numbers or a numpy array)", quoted,
                     req->unread_type[k]);
    }
    set_error(j, "observation refused", err);
    return 0;
}

/* A prepare thread is done with a request (queued, finished or split into elements): the worker may stop waiting. */
static void prepared_one(engine *e) {
    pthread_mutex_lock(&e->mu);
    e->n_preparing--;
    pthread_cond_signal(&e->run_cv);
    pthread_mutex_unlock(&e->mu);
}

/* Requests that have arrived and are not yet ready for the worker (call with mu held). */
static int arriving(const engine *e) {
    int n = e->n_preparing;
    for (const engine_job *j = e->prep_head; j; j = j->next) n++;
    return n;
}

static void queue_run(engine *e, engine_job *j) {
    pthread_mutex_lock(&e->mu);
    push(&e->run_head, &e->run_tail, j);
    e->n_run_queued++;
    pthread_cond_signal(&e->run_cv);
    pthread_mutex_unlock(&e->mu);
}

/* A batch request's elements: each prepared (or refused with its own error) and queued for the worker, which batches
 * them with the other requests. p waits until its last element and this thread's hold are done. */
static void prepare_batch(engine *e, engine_job *p, msgnp_request *req) {
    char err[1024];
    int n = req->n_batch;
    p->items = calloc((size_t)n, sizeof *p->items);
    if (!p->items) {
        set_error(p, "bad request", "out of memory");
        finish(e, p);
        return;
    }
    p->n_items = n;
    p->remaining = n + 1;   /* + this thread's hold: p is not done before the loop is */
    for (int i = 0; i < n; i++) {
        engine_job *c = calloc(1, sizeof *c);
        if (!c) {   /* no element to carry the error: the slot stays NULL, the reply says out of memory */
            pthread_mutex_lock(&e->mu);
            p->remaining--;
            pthread_mutex_unlock(&e->mu);
            continue;
        }
        c->parent = p;
        c->index = i;
        c->conn_id = p->conn_id;
        c->t_start = p->t_start;
        pthread_mutex_lock(&e->mu);
        uint64_t seed = splitmix(&e->seed);
        pthread_mutex_unlock(&e->mu);
        if (!req->batch[i]) set_error(c, "bad request", req->batch_err[i] ? req->batch_err[i] : "?");
        if (req->batch[i] && prepare_one(e, c, req->batch[i], seed, err, sizeof err)) queue_run(e, c);
        else finish(e, c);
    }
    free(p->msg);   /* the elements' arrays may point into it: freed once every element is prepared */
    p->msg = NULL;
    release_batch(e, p);
}

static void *prep_main(void *arg) {
    engine *e = arg;
    msgnp_limits lim = {.max_objects = e->p.max_objects, .noise_h = e->b.noise_h, .noise_a = e->b.noise_a,
                        .task_key = e->b.task_is_prompt ? "task" : NULL};
    char err[1024];
    for (;;) {
        pthread_mutex_lock(&e->mu);
        while (!e->stop && !e->prep_head) pthread_cond_wait(&e->prep_cv, &e->mu);
        if (e->stop) { pthread_mutex_unlock(&e->mu); return NULL; }
        engine_job *j = pop(&e->prep_head, &e->prep_tail);
        uint64_t seed = splitmix(&e->seed);
        e->n_preparing++;
        pthread_mutex_unlock(&e->mu);

        j->t_start = now_ms();
        msgnp_request *req = NULL;
        int ok = msgnp_decode(j->msg, j->len, &lim, &req, err, sizeof err) == PI0_OK;
        if (!ok) set_error(j, "bad request", err);
        if (ok && req->n_batch) {   /* {"batch": [...]}: every element through the batcher on its own */
            prepare_batch(e, j, req);
            msgnp_request_free(req);
            prepared_one(e);
            continue;
        }
        if (ok) ok = prepare_one(e, j, req, seed, err, sizeof err);
        msgnp_request_free(req);
        free(j->msg);
        j->msg = NULL;
        if (ok) queue_run(e, j);
        else finish(e, j);
        prepared_one(e);
    }
}

static void *worker_main(void *arg) {
    engine *e = arg;
    int max = e->p.max_batch, hd = e->b.action_horizon * e->b.action_dim, ha = e->b.noise_h * e->b.noise_a;
    engine_job *batch[256];
    void *prepared[256];
    double *actions = malloc((size_t)max * hd * sizeof(double));
    float *chunks = malloc((size_t)max * ha * sizeof(float));
    char err[1024];
    for (;;) {
        pthread_mutex_lock(&e->mu);
        while (!e->stop && !e->run_head) pthread_cond_wait(&e->run_cv, &e->mu);
        /* the batch: what is queued, plus what arrives within the window, plus (up to max_wait_ms) what has already
         * arrived and is still being prepared: a fleet's requests come back together after a run, and taking the
         * first few alone would split them into a small batch and a late one */
        struct timespec t0, ts; /* run_cv waits on CLOCK_MONOTONIC */
        clock_gettime(CLOCK_MONOTONIC, &t0);
        double wait_max = e->p.max_wait_ms < 0 ? 50 : e->p.max_wait_ms;
        for (;;) {
            if (e->stop || e->n_run_queued >= max) break;
            /* nobody can add to this batch: every connection's request is queued or running (openpi's clients send
             * one request at a time), none is being prepared, and no finished job waits to be answered (its robot
             * would send again at once: running without it would split a fleet into alternating batches). One robot
             * then runs at once instead of after the window (bench/RESULTS.md L131) */
            if (e->idle_clients == 0 && arriving(e) == 0 && !e->done_head) break;
            clock_gettime(CLOCK_MONOTONIC, &ts);
            double el = (ts.tv_sec - t0.tv_sec) * 1e3 + (ts.tv_nsec - t0.tv_nsec) * 1e-6;
            double until = el < e->p.batch_window_ms ? e->p.batch_window_ms : arriving(e) > 0 ? wait_max : 0;
            if (el >= until) break;
            long long ns = ts.tv_nsec + (long long)((until - el) * 1e6);
            ts.tv_sec += ns / 1000000000;
            ts.tv_nsec = ns % 1000000000;
            pthread_cond_timedwait(&e->run_cv, &e->mu, &ts);
        }
        if (e->stop) { pthread_mutex_unlock(&e->mu); break; }
        int n = 0;
        while (n < max && e->run_head) {
            batch[n] = pop(&e->run_head, &e->run_tail);
            prepared[n] = batch[n]->prepared;
            n++;
        }
        e->n_run_queued -= n;
        e->stats.batches++;
        e->stats.batched_requests += n;
        if (n > e->stats.largest_batch) e->stats.largest_batch = n;
        e->stats.batch_sizes[n]++;
        pthread_mutex_unlock(&e->mu);

        double model_ms = 0;
        int zeros = 0;
        int ok = actions && chunks &&
                 e->b.run(e->b.ctx, prepared, n, actions, chunks, &model_ms, &zeros, err, sizeof err) == 0;
        double t_end = now_ms();
        pthread_mutex_lock(&e->mu);
        e->stats.run_lat[lat_bucket(model_ms)]++;
        e->stats.run_lat_sum += model_ms;
        if (ok) e->stats.zero_chunks += (uint64_t)zeros;
        pthread_mutex_unlock(&e->mu);
        for (int i = 0; i < n; i++) {
            engine_job *j = batch[i];
            e->b.release(j->prepared);
            j->prepared = NULL;
            j->batch = n;
            j->model_ms = model_ms;
            j->server_ms = t_end - j->t_start;
            if (ok) {
                j->actions = malloc((size_t)hd * sizeof(double));
                j->chunk_out = malloc((size_t)ha * sizeof(float));
                if (j->actions) memcpy(j->actions, actions + (size_t)i * hd, (size_t)hd * sizeof(double));
                else j->error = strdup("out of memory");
                if (j->chunk_out) memcpy(j->chunk_out, chunks + (size_t)i * ha, (size_t)ha * sizeof(float));
            } else {
                set_error(j, "inference failed", actions && chunks ? err : "out of memory");
            }
            j->next = i + 1 < n ? batch[i + 1] : NULL;
        }
        finish(e, batch[0]);
    }
    free(actions);
    free(chunks);
    return NULL;
}

pi0_status engine_create(engine **out, const srv_backend *b, const engine_params *p) {
    *out = NULL;
    engine *e = calloc(1, sizeof *e);
    if (!e) return PI0_ERR_NOMEM;
    e->b = *b;
    e->p = *p;
    if (e->p.max_batch <= 0) e->p.max_batch = 1;
    if (e->p.max_batch > b->max_batch) e->p.max_batch = b->max_batch;
    if (e->p.max_batch > 256) e->p.max_batch = 256;
    if (e->p.prepare_threads <= 0) e->p.prepare_threads = 2;
    if (e->p.prepare_threads > MAX_PREP_THREADS) e->p.prepare_threads = MAX_PREP_THREADS;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    e->seed = (uint64_t)ts.tv_sec * 1000000007ull ^ (uint64_t)ts.tv_nsec;
    e->idle_clients = -1;
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->prep_cv, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&e->run_cv, &ca);
    pthread_condattr_destroy(&ca);

    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int bad = 0;
    for (; e->n_prep < e->p.prepare_threads && !bad; e->n_prep++)
        bad = pthread_create(&e->prep[e->n_prep], NULL, prep_main, e) != 0;
    if (bad) e->n_prep--;
    if (!bad) {
        bad = pthread_create(&e->worker, NULL, worker_main, e) != 0;
        e->worker_started = !bad;
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (bad) {
        engine_free(e);
        return PI0_ERR_NOMEM;
    }
    *out = e;
    return PI0_OK;
}

void engine_job_free(engine_job *j) {
    if (!j) return;
    for (int i = 0; i < j->n_items; i++) engine_job_free(j->items[i]);
    free(j->items);
    free(j->msg);
    free(j->error);
    free(j->actions);
    free(j->chunk_in);
    free(j->chunk_out);
    free(j);
}

static void free_chain(engine *e, engine_job *j) {
    while (j) {
        engine_job *next = j->next;
        if (j->prepared) e->b.release(j->prepared);
        engine_job *p = j->parent;   /* an unfinished element: its request goes with its last one */
        engine_job_free(j);
        if (p && --p->remaining == 0) engine_job_free(p);
        j = next;
    }
}

void engine_free(engine *e) {
    if (!e) return;
    pthread_mutex_lock(&e->mu);
    e->stop = 1;
    pthread_cond_broadcast(&e->prep_cv);
    pthread_cond_broadcast(&e->run_cv);
    pthread_mutex_unlock(&e->mu);
    for (int i = 0; i < e->n_prep; i++) pthread_join(e->prep[i], NULL);
    if (e->worker_started) pthread_join(e->worker, NULL);
    free_chain(e, e->prep_head);
    free_chain(e, e->run_head);
    free_chain(e, e->done_head);
    pthread_mutex_destroy(&e->mu);
    pthread_cond_destroy(&e->prep_cv);
    pthread_cond_destroy(&e->run_cv);
    free(e);
}

int engine_submit(engine *e, uint64_t conn_id, uint8_t *msg, size_t len, float *chunk) {
    engine_job *j = calloc(1, sizeof *j);
    if (!j) {
        free(msg);
        free(chunk);
        return -1;
    }
    j->conn_id = conn_id;
    j->msg = msg;
    j->len = len;
    j->chunk_in = chunk;
    pthread_mutex_lock(&e->mu);
    push(&e->prep_head, &e->prep_tail, j);
    e->pending++;
    pthread_cond_signal(&e->prep_cv);
    pthread_mutex_unlock(&e->mu);
    return 0;
}

void engine_set_idle_clients(engine *e, int n) {
    pthread_mutex_lock(&e->mu);
    e->idle_clients = n;
    if (n == 0) pthread_cond_signal(&e->run_cv);   /* a worker in its window may run now */
    pthread_mutex_unlock(&e->mu);
}

engine_job *engine_take_done(engine *e) {
    pthread_mutex_lock(&e->mu);
    engine_job *j = e->done_head;
    for (engine_job *k = j; k; k = k->next) e->pending--;
    e->done_head = e->done_tail = NULL;
    pthread_mutex_unlock(&e->mu);
    return j;
}

int engine_pending(engine *e) {
    pthread_mutex_lock(&e->mu);
    int n = e->pending;
    pthread_mutex_unlock(&e->mu);
    return n;
}

void engine_get_stats(engine *e, engine_stats *s) {
    pthread_mutex_lock(&e->mu);
    *s = e->stats;
    s->queued = e->n_run_queued;
    s->preparing = arriving(e);
    pthread_mutex_unlock(&e->mu);
}
