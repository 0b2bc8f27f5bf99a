/* svc-shim: holds one container process (a container's init, or an exec) for svcd, and
 * outlives it.
 *
 * Why not conmon: conmon sits in the data path. Every byte a container writes goes through
 * conmon's log file (each line with a 45-byte prefix), and every byte of input through its
 * attach socket, in 8 KiB packets; with a daemon running, that costs 2-4x the throughput of
 * plain pipes. This shim stays out of the data path while a daemon is connected: it hands
 * the daemon duplicates of the container's pipe ends (or its pty master) and reads nothing.
 * Only when the daemon's connection goes (SIGTERM with live restore, SIGKILL, a crash) does it
 * drain the pipes, into a spool file the next daemon reads back. It is the container's
 * subreaper, so the exit status is never lost, and it writes that status to a file.
 *
 * Usage:
 *   svc-shim -d DIR -b BUNDLE -i ID -r RUNC [-R RUNC_ROOT] [-t] [-s [-o]] [-e PROCESS_JSON]
 *            [-m SPOOL_MAX]
 *   -t: the process has a terminal (runc sends its pty master to the shim's console socket)
 *   -s: the process reads stdin (a pipe the shim keeps open while no daemon is there)
 *   -o: with -s, stdin ends when the daemon's connection does (an exec session's: no client
 *       can reach it again)
 *   -e: run `runc exec --detach --process PROCESS_JSON` in running container ID instead of
 *       `runc create` of BUNDLE (the exec's process is then held, as an init is)
 *   The environment names the sync pipe: SVC_SHIM_SYNC=<fd>.
 *
 * Files, in DIR (the shim's working directory):
 *   shim.sock  SOCK_SEQPACKET; the daemon connects (one at a time)
 *   spool      output drained while no daemon was connected: records of a 24-byte head
 *              (u8 stream 1|2, 3 zero bytes, u32 length, u64 CLOCK_REALTIME ns, u64 the
 *              stream's offset of the first byte; little endian) and the bytes
 *   exit       "<code> <ns> <dropped>\n" once the process has ended (code: its exit status,
 *              or 128 + the signal that killed it; dropped: output bytes the full spool did
 *              not keep); written atomically, after the output
 *   init.pid   runc's pid file; runc.log runc's messages (json)
 *
 * Journals: the daemon reads an output pipe without taking from it (tee(2) copies what it
 * holds), logs the copy, and only then moves those bytes out of the pipe with splice(2)
 * into the stream's journal, a pipe whose read end the shim keeps, reading and counting what
 * arrives. So the shim always knows each stream's offset (what left the pipe: through the
 * journal, or drained by itself), a daemon killed at any moment has logged what left the
 * pipe, and the next one skips what its log has (its cursor's offset): nothing is lost (a
 * kill between the log's write and the cursor's, microseconds apart, logs one chunk twice),
 * and there is no round trip per chunk (the splice is the daemon's own, synchronous).
 *
 * Protocol on shim.sock, one message per packet, text lines:
 *   shim -> daemon  "hello <spool_size> <acked> <dropped> <exited> <code> <exit_ns> <out>
 *                   <err>\n" at connect (out, err: each stream's offset of the byte at the
 *                   head of its pipe: how many have been taken out of it), with SCM_RIGHTS:
 *                   the pty master (-t), or stdout's and stderr's read ends, the write ends
 *                   of their journals, and stdin's write end (-s, until closed)
 *                   "exit <code> <ns>\n" when the process ends
 *   daemon -> shim  "ack <offset>\n": the spool up to offset is read and kept elsewhere (it
 *                   no longer counts toward SPOOL_MAX)
 *                   "close-stdin\n": the container's stdin ends (the shim's end is closed;
 *                   the daemon closes its own)
 *                   "done\n": the process has ended and the daemon read its output to the
 *                   end: the shim exits
 *
 * On the sync pipe: "ok <shim pid> <process pid>\n", or "error <runc's exit status> <shim
 * pid>\n" (the shim then exits; runc's words are in runc.log). The first process exits once
 * the report is written; the shim lives on in its own session. Until the launching daemon
 * has connected (30 s at most), the output waits in the pipes for it.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define BUF_SIZE (64 * 1024)
#define HEAD_SIZE 24
#define PIPE_SIZE (1024 * 1024)
#define EXIT_DRAIN_MS 2000 /* after the process ends, how long output may still trickle in */
#define FIRST_CLIENT_WAIT (30LL * 1000000000LL) /* bound on the launching daemon's connect */

struct opts {
    const char *dir, *bundle, *id, *runc, *root, *process;
    int tty, stdin_pipe, stdin_once;
    long long spool_max;
};

static struct opts o = {.spool_max = 256LL << 20};
static int sync_fd = -1;

/* the process's stdio: [0] stdin's write end, [1] stdout's read end, [2] stderr's read end;
 * with a terminal, [1] is the pty master and [0], [2] are -1 */
static int io[3] = {-1, -1, -1};
static int io_eof[3];

static int spool_fd = -1;
static long long spool_size, acked, dropped;
static long long pos[3]; /* [1], [2]: bytes taken out of stdout's, stderr's pipe so far */
static int journal[3][2] = {{-1, -1}, {-1, -1}, {-1, -1}}; /* [1], [2]: read, write ends */

static void read_journal(int i);

static pid_t pid;               /* the process held */
static int exited, exit_code;   /* once it has ended */
static long long exit_ns;

static void die(const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (sync_fd >= 0)
        dprintf(sync_fd, "error -1 %d %s\n", (int)getpid(), msg);
    else
        fprintf(stderr, "svc-shim: %s\n", msg);
    _exit(1);
}

static long long now_ns(clockid_t clock) {
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void set_nonblock(int fd) {
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0)
        fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

static int write_all(int fd, const void *buf, size_t len) {
    const char *p = buf;
    while (len > 0) {
        ssize_t n = write(fd, p, len);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

/* path written atomically: a temporary file, fsync, rename, the directory's fsync */
static void write_file(const char *name, const char *text) {
    char tmp[64];
    snprintf(tmp, sizeof tmp, ".%s.tmp", name);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0)
        return;
    if (write_all(fd, text, strlen(text)) < 0 || fsync(fd) < 0) {
        close(fd);
        unlink(tmp);
        return;
    }
    close(fd);
    if (rename(tmp, name) < 0) {
        unlink(tmp);
        return;
    }
    int dfd = open(".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        fsync(dfd);
        close(dfd);
    }
}

/* --- spool --------------------------------------------------------------------------- */

static void spool(int stream, const char *data, size_t len) {
    long long at = pos[stream];
    pos[stream] += (long long)len;
    if (spool_size - acked + HEAD_SIZE + (long long)len > o.spool_max) {
        dropped += (long long)len;
        return;
    }
    if (spool_fd < 0) {
        spool_fd = open("spool", O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
        if (spool_fd < 0) {
            dropped += (long long)len;
            return;
        }
        struct stat st;
        if (fstat(spool_fd, &st) == 0)
            spool_size = st.st_size;
    }
    unsigned char head[HEAD_SIZE] = {0};
    uint32_t n32 = (uint32_t)len;
    uint64_t ts = (uint64_t)now_ns(CLOCK_REALTIME), offset = (uint64_t)at;
    head[0] = (unsigned char)stream;
    memcpy(head + 4, &n32, 4); /* (x86 and arm64 are little endian, as the format) */
    memcpy(head + 8, &ts, 8);
    memcpy(head + 16, &offset, 8);
    struct iovec iov[2] = {{head, HEAD_SIZE}, {(void *)data, len}};
    size_t want = HEAD_SIZE + len, done = 0;
    while (done < want) {
        ssize_t n = writev(spool_fd, iov, 2);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) { /* a full disk: what was written of the record goes */
            if (ftruncate(spool_fd, spool_size) < 0) { /* nothing more to do */ }
            dropped += (long long)len;
            return;
        }
        done += (size_t)n;
        for (int i = 0; i < 2 && n > 0; i++) { /* advance past what was written */
            size_t take = (size_t)n < iov[i].iov_len ? (size_t)n : iov[i].iov_len;
            iov[i].iov_base = (char *)iov[i].iov_base + take;
            iov[i].iov_len -= take;
            n -= (ssize_t)take;
        }
    }
    spool_size += (long long)want;
}

/* read what stream i holds now into the spool; 0 when it would block, 1 at its end */
static int drain_one(int i) {
    static char buf[BUF_SIZE];
    read_journal(i); /* what a daemon moved out before it went comes first */
    for (int rounds = 0; rounds < 16; rounds++) {
        ssize_t n = read(io[i], buf, sizeof buf);
        if (n > 0) {
            spool(i == 2 ? 2 : 1, buf, (size_t)n);
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN)
            return 0;
        io_eof[i] = 1; /* EOF, or EIO: the pty's other side is gone */
        return 1;
    }
    return 0;
}

/* --- the process ---------------------------------------------------------------------- */

static void reaped(int status) {
    exited = 1;
    exit_code = WIFEXITED(status) ? WEXITSTATUS(status)
              : WIFSIGNALED(status) ? 128 + WTERMSIG(status) : 255;
    exit_ns = now_ns(CLOCK_REALTIME);
}

static void reap(void) {
    int status;
    pid_t p;
    while ((p = waitpid(-1, &status, WNOHANG)) > 0)
        if (p == pid && !exited)
            reaped(status);
}

static void write_exit(void) {
    char text[64];
    if (spool_fd >= 0)
        fsync(spool_fd); /* the output before the end */
    snprintf(text, sizeof text, "%d %lld %lld\n", exit_code, exit_ns, dropped);
    write_file("exit", text);
}

/* a console socket's path runc can connect to (a socket's path holds 107 bytes) */
static void console_path(char *out, size_t size) {
    char cwd[PATH_MAX];
    if (getcwd(cwd, sizeof cwd) && strlen(cwd) + sizeof "/console.sock" <= 100)
        snprintf(out, size, "%s/console.sock", cwd);
    else
        snprintf(out, size, "/proc/%d/cwd/console.sock", (int)getpid());
}

static int listen_unix(const char *name, int type) {
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    snprintf(addr.sun_path, sizeof addr.sun_path, "%s", name);
    unlink(name);
    int fd = socket(AF_UNIX, type | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0 || bind(fd, (struct sockaddr *)&addr, sizeof addr) < 0 || listen(fd, 4) < 0)
        die("listening on %s: %s", name, strerror(errno));
    chmod(name, 0600);
    return fd;
}

/* the pty master runc sends to the console socket */
static int receive_master(int sock) {
    char byte[1024];
    char control[CMSG_SPACE(sizeof(int))];
    struct iovec iov = {byte, sizeof byte};
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = control,
                         .msg_controllen = sizeof control};
    if (recvmsg(sock, &msg, MSG_CMSG_CLOEXEC) < 0)
        return -1;
    struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
    if (!c || c->cmsg_type != SCM_RIGHTS)
        return -1;
    int fd;
    memcpy(&fd, CMSG_DATA(c), sizeof fd);
    return fd;
}

/* children reaped while runc ran: the process itself may be one (an exec that ends at
 * once is reparented to the shim, and reaped, before runc has exited) */
#define EARLY_MAX 64
static pid_t early_pid[EARLY_MAX];
static int early_status[EARLY_MAX], n_early;

/* runc create (or exec) of the process; its pid, or -1 with runc's exit status in *status */
static pid_t run_runc(int sigfd, int *status) {
    int in[2] = {-1, -1}, out[2] = {-1, -1}, err[2] = {-1, -1};
    int console = -1;
    char console_sock[PATH_MAX];
    if (o.tty) {
        console_path(console_sock, sizeof console_sock);
        console = listen_unix("console.sock", SOCK_STREAM);
    } else {
        if (pipe2(out, O_CLOEXEC) < 0 || pipe2(err, O_CLOEXEC) < 0)
            die("pipe: %s", strerror(errno));
        if (o.stdin_pipe && pipe2(in, O_CLOEXEC) < 0)
            die("pipe: %s", strerror(errno));
        fcntl(out[0], F_SETPIPE_SZ, PIPE_SIZE);
        fcntl(err[0], F_SETPIPE_SZ, PIPE_SIZE);
        if (in[0] >= 0)
            fcntl(in[0], F_SETPIPE_SZ, PIPE_SIZE);
    }
    const char *argv[32];
    int n = 0;
    argv[n++] = o.runc;
    if (o.root) {
        argv[n++] = "--root";
        argv[n++] = o.root;
    }
    argv[n++] = "--log";
    argv[n++] = "runc.log";
    argv[n++] = "--log-format";
    argv[n++] = "json";
    if (o.process) {
        argv[n++] = "exec";
        argv[n++] = "--detach";
        argv[n++] = "--process";
        argv[n++] = o.process;
    } else {
        argv[n++] = "create";
        argv[n++] = "--bundle";
        argv[n++] = o.bundle;
    }
    argv[n++] = "--pid-file";
    argv[n++] = "init.pid";
    if (o.tty) {
        argv[n++] = "--console-socket";
        argv[n++] = console_sock;
    }
    argv[n++] = o.id;
    argv[n] = NULL;

    pid_t runc = fork();
    if (runc < 0)
        die("fork: %s", strerror(errno));
    if (runc == 0) {
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        int nul = open("/dev/null", O_RDWR);
        int fds[3] = {in[0] >= 0 ? in[0] : nul, out[1] >= 0 ? out[1] : nul,
                      err[1] >= 0 ? err[1] : nul};
        for (int i = 0; i < 3; i++) /* dup2 of an fd onto itself keeps its CLOEXEC */
            fds[i] = fds[i] == i ? dup(fds[i]) : fds[i];
        for (int i = 0; i < 3; i++)
            dup2(fds[i], i);
        execvp(argv[0], (char *const *)argv);
        _exit(127);
    }
    /* the process's ends belong to it (runc passes them on) */
    if (in[0] >= 0)
        close(in[0]);
    if (out[1] >= 0) {
        close(out[1]);
        close(err[1]);
    }
    io[0] = in[1];
    io[1] = o.tty ? -1 : out[0];
    io[2] = o.tty ? -1 : err[0];

    int runc_status = -1;
    while (runc_status < 0 || (o.tty && io[1] < 0 && WIFEXITED(runc_status) &&
                               WEXITSTATUS(runc_status) == 0)) {
        struct pollfd p[2] = {{sigfd, POLLIN, 0}, {console, POLLIN, 0}};
        if (poll(p, console >= 0 ? 2 : 1, -1) < 0 && errno != EINTR)
            die("poll: %s", strerror(errno));
        if (console >= 0 && (p[1].revents & POLLIN)) {
            int conn = accept4(console, NULL, NULL, SOCK_CLOEXEC);
            if (conn >= 0) {
                io[1] = receive_master(conn);
                close(conn);
                if (io[1] >= 0) {
                    close(console);
                    console = -1;
                    unlink("console.sock");
                }
            }
        }
        if (p[0].revents & POLLIN) {
            struct signalfd_siginfo si;
            while (read(sigfd, &si, sizeof si) == sizeof si) { /* drained */ }
            int st;
            pid_t r;
            while ((r = waitpid(-1, &st, WNOHANG)) > 0) {
                if (r == runc)
                    runc_status = st;
                else if (n_early < EARLY_MAX) { /* an exec that ended before runc did */
                    early_pid[n_early] = r;
                    early_status[n_early++] = st;
                }
            }
        }
        if (runc_status >= 0 && o.tty && io[1] < 0)
            break; /* runc ended without sending a terminal */
    }
    if (console >= 0) {
        close(console);
        unlink("console.sock");
    }
    if (!WIFEXITED(runc_status) || WEXITSTATUS(runc_status) != 0) {
        *status = WIFEXITED(runc_status) ? WEXITSTATUS(runc_status) : 128 + WTERMSIG(runc_status);
        return -1;
    }
    if (o.tty && io[1] < 0) {
        *status = 1;
        return -1;
    }
    char text[32] = {0};
    int fd = open("init.pid", O_RDONLY | O_CLOEXEC);
    if (fd < 0 || read(fd, text, sizeof text - 1) <= 0)
        die("runc wrote no pid file");
    close(fd);
    pid_t p = (pid_t)atoi(text);
    if (p <= 0)
        die("runc's pid file holds no pid");
    return p;
}

/* --- the daemon's connection --------------------------------------------------------- */

static int client = -1;
static int done;

static void send_fds(int sock, const char *text, const int *fds, int nfds) {
    char control[CMSG_SPACE(5 * sizeof(int))];
    memset(control, 0, sizeof control);
    struct iovec iov = {(void *)text, strlen(text)};
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1};
    if (nfds > 0) {
        msg.msg_control = control;
        msg.msg_controllen = CMSG_SPACE(nfds * sizeof(int));
        struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(nfds * sizeof(int));
        memcpy(CMSG_DATA(c), fds, nfds * sizeof(int));
    }
    while (sendmsg(sock, &msg, MSG_NOSIGNAL) < 0 && errno == EINTR) { /* again */ }
}

static void hello(void) {
    char text[200];
    int fds[5], nfds = 0;
    read_journal(1); /* (what the last daemon moved: the offsets told are exact) */
    read_journal(2);
    snprintf(text, sizeof text, "hello %lld %lld %lld %d %d %lld %lld %lld\n", spool_size,
             acked, dropped, exited, exit_code, exit_ns, pos[1], pos[2]);
    if (o.tty) {
        fds[nfds++] = io[1];
    } else {
        fds[nfds++] = io[1];
        fds[nfds++] = io[2];
        fds[nfds++] = journal[1][1];
        fds[nfds++] = journal[2][1];
        if (io[0] >= 0)
            fds[nfds++] = io[0];
    }
    send_fds(client, text, fds, nfds);
}

/* count (and drop) what the daemon moved out of stream i's pipe into its journal: it is
 * logged. Before the shim drains the pipe itself, and before it tells a daemon the offsets. */
static void read_journal(int i) {
    static int devnull = -1;
    if (journal[i][0] < 0)
        return;
    if (devnull < 0)
        devnull = open("/dev/null", O_WRONLY | O_CLOEXEC);
    for (;;) {
        ssize_t k = splice(journal[i][0], NULL, devnull, NULL, PIPE_SIZE, SPLICE_F_NONBLOCK);
        if (k > 0) {
            pos[i] += k;
            continue;
        }
        if (k < 0 && errno == EINTR)
            continue;
        return; /* empty (EAGAIN) */
    }
}

static void client_gone(void) {
    close(client);
    client = -1;
    if (o.stdin_once && io[0] >= 0) {
        close(io[0]);
        io[0] = -1;
    }
}

static void from_client(void) {
    char text[128];
    ssize_t n = recv(client, text, sizeof text - 1, MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return;
    if (n <= 0) {
        client_gone();
        return;
    }
    text[n] = 0;
    long long offset;
    if (sscanf(text, "ack %lld", &offset) == 1) {
        if (offset > acked && offset <= spool_size)
            acked = offset;
    } else if (strncmp(text, "close-stdin", 11) == 0) {
        if (io[0] >= 0) {
            close(io[0]);
            io[0] = -1;
        }
    } else if (strncmp(text, "done", 4) == 0) {
        done = 1;
    }
}

/* whether the last drain (the process has ended, no daemon reads) has had its time: what
 * holds the pipes after the process's end (no pid namespace) cannot keep the shim forever */
static int drain_expired(void) {
    static long long since = -1;
    long long t = now_ns(CLOCK_MONOTONIC);
    if (since < 0)
        since = t;
    return t - since >= EXIT_DRAIN_MS * 1000000LL;
}

static void usage(void) {
    fprintf(stderr, "usage: svc-shim -d DIR -b BUNDLE -i ID -r RUNC [-R ROOT] [-t] [-s [-o]] "
                    "[-e PROCESS_JSON] [-m SPOOL_MAX]\n");
    exit(2);
}

int main(int argc, char **argv) {
    int c;
    while ((c = getopt(argc, argv, "d:b:i:r:R:tsoe:m:")) != -1) {
        switch (c) {
        case 'd': o.dir = optarg; break;
        case 'b': o.bundle = optarg; break;
        case 'i': o.id = optarg; break;
        case 'r': o.runc = optarg; break;
        case 'R': o.root = optarg; break;
        case 't': o.tty = 1; break;
        case 's': o.stdin_pipe = 1; break;
        case 'o': o.stdin_once = 1; break;
        case 'e': o.process = optarg; break;
        case 'm': o.spool_max = atoll(optarg); break;
        default: usage();
        }
    }
    if (!o.dir || !o.id || !o.runc || (!o.bundle && !o.process))
        usage();
    const char *sync = getenv("SVC_SHIM_SYNC");
    if (sync)
        sync_fd = atoi(sync);
    if (chdir(o.dir) < 0)
        die("%s: %s", o.dir, strerror(errno));

    /* the first process reports nothing itself: the shim does, once runc has answered */
    pid_t child = fork();
    if (child < 0)
        die("fork: %s", strerror(errno));
    if (child > 0)
        _exit(0);
    setsid();
    if (prctl(PR_SET_CHILD_SUBREAPER, 1) < 0)
        die("subreaper: %s", strerror(errno));
    int nul = open("/dev/null", O_RDWR);
    if (nul >= 0) {
        dup2(nul, 0);
        dup2(nul, 1);
        dup2(nul, 2);
        if (nul > 2)
            close(nul);
    }
    sigset_t mask;
    sigemptyset(&mask);
    sigaddset(&mask, SIGCHLD);
    sigaddset(&mask, SIGTERM);
    sigaddset(&mask, SIGINT);
    sigaddset(&mask, SIGQUIT);
    sigaddset(&mask, SIGHUP);
    sigprocmask(SIG_BLOCK, &mask, NULL);
    signal(SIGPIPE, SIG_IGN);
    int sigfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
    if (sigfd < 0)
        die("signalfd: %s", strerror(errno));

    int listener = listen_unix("shim.sock", SOCK_SEQPACKET);
    unlink("exit");
    unlink("spool");
    int runc_status = 0;
    pid = run_runc(sigfd, &runc_status);
    if (pid < 0) {
        if (sync_fd >= 0)
            dprintf(sync_fd, "error %d %d\n", runc_status, (int)getpid());
        unlink("shim.sock");
        return 1;
    }
    for (int i = 0; i < 3; i++)
        if (io[i] >= 0)
            set_nonblock(io[i]);
    for (int i = 1; i < 3 && !o.tty; i++) {
        if (pipe2(journal[i], O_CLOEXEC | O_NONBLOCK) < 0)
            die("pipe: %s", strerror(errno));
        fcntl(journal[i][0], F_SETPIPE_SZ, PIPE_SIZE);
    }
    char pidtext[32];
    snprintf(pidtext, sizeof pidtext, "%d\n", (int)getpid());
    write_file("shim.pid", pidtext);
    if (sync_fd >= 0) {
        dprintf(sync_fd, "ok %d %d\n", (int)getpid(), (int)pid);
        close(sync_fd);
        sync_fd = -1;
    }
    for (int i = 0; i < n_early; i++)
        if (early_pid[i] == pid)
            reaped(early_status[i]);
    reap(); /* (an exec may have ended since) */
    int exit_written = 0;
    int awaiting_first = 1;
    long long launched_at = now_ns(CLOCK_MONOTONIC);

    for (;;) {
        if (exited && !exit_written) {
            write_exit();
            exit_written = 1;
            if (client >= 0) {
                char text[64];
                snprintf(text, sizeof text, "exit %d %lld\n", exit_code, exit_ns);
                send_fds(client, text, NULL, 0);
            }
        }
        /* the daemon that launched the shim connects at once: until it has (or a bound
         * has passed: it died meanwhile), the output waits in the pipes for it, and the
         * shim waits too (an exec may end before the daemon has connected) */
        if (awaiting_first && now_ns(CLOCK_MONOTONIC) - launched_at > FIRST_CLIENT_WAIT)
            awaiting_first = 0;
        int away = client < 0 && !awaiting_first; /* no daemon: the shim drains */
        int outputs_open = 0;
        for (int i = 1; i < 3; i++)
            outputs_open += io[i] >= 0 && !io_eof[i];
        if (exited && (done || (away && (!outputs_open || drain_expired()))))
            break;

        struct pollfd p[7];
        int np = 0, at_client = -1, at_out[3] = {-1, -1, -1}, at_journal = np + 2;
        p[np++] = (struct pollfd){sigfd, POLLIN, 0};
        p[np++] = (struct pollfd){listener, POLLIN, 0};
        for (int i = 1; i < 3; i++) /* (always: a daemon moves logged output there) */
            p[np++] = (struct pollfd){journal[i][0], journal[i][0] >= 0 ? POLLIN : 0, 0};
        if (client >= 0) {
            at_client = np;
            p[np++] = (struct pollfd){client, POLLIN, 0};
        } else if (away) {
            for (int i = 1; i < 3; i++)
                if (io[i] >= 0 && !io_eof[i]) {
                    at_out[i] = np;
                    p[np++] = (struct pollfd){io[i], POLLIN, 0};
                }
        }
        int timeout = awaiting_first ? 100 : exited && away ? 100 : -1;
        if (poll(p, (nfds_t)np, timeout) < 0) {
            if (errno == EINTR)
                continue;
            die("poll: %s", strerror(errno));
        }
        if (p[0].revents & POLLIN) {
            struct signalfd_siginfo si;
            while (read(sigfd, &si, sizeof si) == sizeof si) {
                if (si.ssi_signo == SIGCHLD)
                    reap();
                else if (si.ssi_signo != SIGHUP && !exited)
                    kill(pid, (int)si.ssi_signo); /* passed on, as conmon does */
            }
        }
        if (p[1].revents & POLLIN) {
            int conn = accept4(listener, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
            if (conn >= 0) {
                if (client >= 0) /* the old daemon is gone: its close was not yet seen */
                    client_gone();
                client = conn;
                awaiting_first = 0;
                hello(); /* (it tells an end that came before) */
            }
        }
        for (int i = 1; i < 3; i++)
            if (p[at_journal + i - 1].revents)
                read_journal(i);
        if (at_client >= 0 && client >= 0 && p[at_client].revents)
            from_client();
        for (int i = 1; i < 3; i++)
            if (at_out[i] >= 0 && p[at_out[i]].revents && away && client < 0)
                drain_one(i);
    }
    if (!done)
        write_exit(); /* again: the output drained after the first (and what it dropped) */
    unlink("shim.sock");
    return 0;
}
