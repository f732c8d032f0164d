/* The child-process watch's clock (faulthunt.children), off the GIL.

   A worker polls its descendants every poll_s while a test runs. A Python thread that wakes ten
   times a second costs the worker about 0.1 ms of CPU a wake (the GIL taken from the test, two
   thread switches) whether or not there is anything to look at, and a worker of a CPU-only suite
   starts no process at all. This thread wakes instead, asks the kernel whether the process has any
   child (waitid P_ALL, WNOHANG | WNOWAIT | __WALL: reaps nothing, ECHILD only when there is none)
   and writes one byte to a pipe only when there is one; the Python side blocks on that pipe and
   polls /proc as before. Same interval, same children seen; nothing in Python while there is none.

   A CPython extension module (its four functions, the same names as the C ones) so that a worker
   imports it without ctypes (about 7 M instructions of every worker); optional: without it
   faulthunt.children wakes in Python. No call here needs the GIL released: cw_stop joins a thread
   that never takes it. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef __WALL
#define __WALL 0x40000000
#endif
#define EXPORT static

/* bumped when the functions below change; children.py checks it */
#define CW_ABI 1

static pthread_t g_thread;
static int g_running, g_stop, g_fd = -1;
static int64_t g_interval_ns;
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_cv;

EXPORT int cw_abi(void) { return CW_ABI; }

/* 1: the process has a child (or the kernel cannot say: Python then reads /proc), 0: none */
EXPORT int cw_has_children(void) {
    siginfo_t info;
    if (waitid(P_ALL, 0, &info, WEXITED | WNOHANG | WNOWAIT | __WALL) == 0) return 1;
    return errno != ECHILD;
}

static void add_ns(struct timespec *t, int64_t ns) {
    t->tv_sec += (time_t)(ns / 1000000000);
    t->tv_nsec += (long)(ns % 1000000000);
    if (t->tv_nsec >= 1000000000) {
        t->tv_sec += 1;
        t->tv_nsec -= 1000000000;
    }
}

static void *loop(void *arg) {
    (void)arg;
    struct timespec until;
    pthread_mutex_lock(&g_mu);
    while (!g_stop) {
        clock_gettime(CLOCK_MONOTONIC, &until);
        add_ns(&until, g_interval_ns);
        while (!g_stop && pthread_cond_timedwait(&g_cv, &g_mu, &until) != ETIMEDOUT) {
        }
        if (g_stop) break;
        if (cw_has_children()) {
            char one = 1;
            ssize_t n = write(g_fd, &one, 1); /* non-blocking: a full pipe already says it */
            (void)n;
        }
    }
    pthread_mutex_unlock(&g_mu);
    return NULL;
}

/* Start the clock: a byte to fd every interval_ns while the process has a child. 0, or -1 when
   it runs already or the thread cannot start. */
EXPORT int cw_start(int fd, int64_t interval_ns) {
    if (g_running || interval_ns <= 0) return -1;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&g_cv, &ca);
    pthread_condattr_destroy(&ca);
    g_fd = fd;
    g_interval_ns = interval_ns;
    g_stop = 0;
    /* every signal stays with the process's own threads (Python's handlers run in the main one) */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(&g_thread, NULL, loop, NULL);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc) return -1;
    g_running = 1;
    return 0;
}

/* Stop the clock and wait for its thread (the caller closes the pipe afterwards). */
EXPORT void cw_stop(void) {
    if (!g_running) return;
    pthread_mutex_lock(&g_mu);
    g_stop = 1;
    pthread_cond_signal(&g_cv);
    pthread_mutex_unlock(&g_mu);
    pthread_join(g_thread, NULL);
    g_running = 0;
}

/* A forked child has no clock thread (and may inherit a held lock): it starts from nothing. */
static void after_fork_child(void) {
    g_running = 0;
    g_stop = 0;
    pthread_mutex_init(&g_mu, NULL);
}

__attribute__((constructor)) static void init(void) {
    pthread_atfork(NULL, NULL, after_fork_child);
}

/* --- the Python module ------------------------------------------------------------------------ */

static PyObject *py_abi(PyObject *self, PyObject *noargs) {
    (void)self; (void)noargs;
    return PyLong_FromLong(cw_abi());
}

static PyObject *py_has_children(PyObject *self, PyObject *noargs) {
    (void)self; (void)noargs;
    return PyLong_FromLong(cw_has_children());
}

static PyObject *py_start(PyObject *self, PyObject *args) {
    (void)self;
    int fd;
    long long interval_ns;
    if (!PyArg_ParseTuple(args, "iL", &fd, &interval_ns)) return NULL;
    return PyLong_FromLong(cw_start(fd, (int64_t)interval_ns));
}

static PyObject *py_stop(PyObject *self, PyObject *noargs) {
    (void)self; (void)noargs;
    cw_stop();
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"cw_abi", py_abi, METH_NOARGS, "the functions' version (children._WAKE_ABI)"},
    {"cw_has_children", py_has_children, METH_NOARGS,
     "1: this process has a child (or the kernel cannot say), 0: none"},
    {"cw_start", py_start, METH_VARARGS,
     "cw_start(fd, interval_ns): a byte to fd every interval while there is a child; 0 or -1"},
    {"cw_stop", py_stop, METH_NOARGS, "stop the clock and join its thread"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_childwake",
                                    "the child-process watch's clock (faulthunt.children)", -1,
                                    methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__childwake(void) { return PyModule_Create(&module); }
