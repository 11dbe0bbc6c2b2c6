/*
 * lego-execd: the task container's main process (under docker-init), running
 * the host's commands without a `runc exec` each (~40 ms apiece on a 2-core
 * host; a fork here is well under 1 ms).
 *
 * It reads framed requests from its stdin (the host's attach stream) and
 * writes framed output to its stdout; exec-channel.ts is the other end and
 * documents the frames. It runs as root holding only KILL, SETUID, SETGID and
 * SETPCAP, and starts each command the way `docker exec` would for a non-root
 * user: its own session, an empty capability bounding set, its gid as its only
 * group, no capabilities left, no-new-privileges. Nothing the agent can write
 * (the container's /etc files) is read while root. Root commands are refused: they go through
 * `docker exec`. The agent's uid cannot signal, trace or read this process.
 *
 * Built static on the host (exec-server.ts) and bind-mounted read-only, so it
 * needs nothing from the image. Written in C because it must be running within
 * a millisecond of the container's start; no library does this job.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/capability.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

enum {
  MAX_COMMANDS = 1024,
  MAX_FRAME = 64 << 20, /* a request carries its stdin; the host caps it lower */
  CHUNK = 64 << 10,
  KILL_GRACE_MS = 5000,
};

/* Frame types: host → execd: 'R' run, 'K' kill. execd → host: 'O' stdout, 'E' stderr, 'X' exit, 'F' could not start. */

struct command {
  int used;
  uint32_t id;
  pid_t pid;
  int out, err, in; /* our ends of its pipes; -1 once closed */
  char *stdin_buf;
  size_t stdin_len, stdin_off;
  int exited, status, killed, held;
  int64_t deadline_ms, hold_until_ms; /* 0: none */
};

static struct command commands[MAX_COMMANDS];
static int sigchld_pipe[2];

static int64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void put_u32(unsigned char *p, uint32_t v) {
  p[0] = v & 0xff; p[1] = (v >> 8) & 0xff; p[2] = (v >> 16) & 0xff; p[3] = (v >> 24) & 0xff;
}

static uint32_t get_u32(const unsigned char *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Set once a write to the host failed: a frame cut short would misalign every later one, so none follow. */
static int host_gone;

/* One whole frame to the host, or none. A host that went away is not our failure: commands run on. */
static void send_frame(char type, uint32_t id, const void *data, size_t len) {
  if (host_gone) return;
  unsigned char head[9];
  head[0] = (unsigned char)type;
  put_u32(head + 1, id);
  put_u32(head + 5, (uint32_t)len);
  struct iovec iov[2] = {{head, sizeof head}, {(void *)data, len}};
  int n = len ? 2 : 1;
  while (n > 0) {
    ssize_t w = writev(1, iov + (2 - n), n);
    if (w < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN) {
        struct pollfd out = {1, POLLOUT, 0};
        poll(&out, 1, -1);
        continue;
      }
      host_gone = 1;
      return;
    }
    for (struct iovec *v = iov + (2 - n); w > 0 && n > 0;) {
      if ((size_t)w >= v->iov_len) { w -= v->iov_len; v->iov_len = 0; v++; n--; }
      else { v->iov_base = (char *)v->iov_base + w; v->iov_len -= w; w = 0; }
    }
  }
}

static void send_failure(uint32_t id, const char *what, int err) {
  char msg[512];
  int len = snprintf(msg, sizeof msg, "%s: %s", what, strerror(err));
  send_frame('F', id, msg, len > 0 ? (size_t)len : 0);
}

static void on_sigchld(int sig) {
  (void)sig;
  int saved = errno;
  char b = 0;
  (void)!write(sigchld_pipe[1], &b, 1);
  errno = saved;
}

static void close_fd(int *fd) {
  if (*fd >= 0) close(*fd);
  *fd = -1;
}

/* Runs argv[0] found on envp's PATH as runc does (no /bin/sh retry for a file without a shebang); never returns. */
static void exec_as_docker(char **argv, char **envp) {
  const char *prog = argv[0];
  if (strchr(prog, '/')) {
    execve(prog, argv, envp);
    fprintf(stderr, "lego-execd: exec \"%s\": %s\n", prog, errno == ENOEXEC ? "exec format error" : strerror(errno));
    _exit(errno == ENOEXEC ? 1 : 126); /* runc finds a bad format only once started: exit 1 */
  }
  const char *path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
  for (char **e = envp; *e; e++) if (strncmp(*e, "PATH=", 5) == 0) path = *e + 5;
  int format_error = 0;
  char full[4096];
  for (const char *dir = path;; dir++) {
    size_t len = strcspn(dir, ":");
    if (snprintf(full, sizeof full, "%.*s/%s", (int)len, len ? dir : ".", prog) < (int)sizeof full) {
      execve(full, argv, envp);
      if (errno == ENOEXEC) format_error = 1;
    }
    dir += len;
    if (!*dir) break;
  }
  fprintf(stderr, "lego-execd: exec \"%s\": %s\n", prog, format_error ? "exec format error" : "executable file not found in $PATH");
  _exit(format_error ? 1 : 126);
}

/* In the child: become the user with nothing left to gain, then exec. Failures exit as `docker exec`'s do (126, or 1). */
static void become_and_exec(uid_t uid, gid_t gid, const char *cwd, char **argv, char **envp) {
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, NULL);
  for (int s = 1; s < NSIG; s++) signal(s, SIG_DFL);
  for (int cap = 0;; cap++) {
    if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) == 0) continue;
    if (errno == EINVAL) break; /* past the kernel's last capability */
    perror("lego-execd: dropping the capability bounding set");
    _exit(126);
  }
  /*
   * The gid as the only group: what `docker exec --user UID:GID` gives. Nothing of the container's
   * (its /etc/group, which the agent may be able to rewrite or point elsewhere) is read while root.
   */
  if (setgroups(1, &gid) || setgid(gid) || setuid(uid)) { perror("lego-execd: switching to the command's user"); _exit(126); }
  struct __user_cap_header_struct head = {_LINUX_CAPABILITY_VERSION_3, 0};
  struct __user_cap_data_struct none_caps[2] = {{0, 0, 0}, {0, 0, 0}};
  if (syscall(SYS_capset, &head, none_caps) || prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)) {
    perror("lego-execd: clearing capabilities");
    _exit(126);
  }
  if (cwd[0] && chdir(cwd)) { fprintf(stderr, "lego-execd: chdir to %s: %s\n", cwd, strerror(errno)); _exit(126); }
  exec_as_docker(argv, envp);
}

/* The host's environment overrides replace inherited entries of the same name. */
static char **merged_env(char **overrides, uint32_t n) {
  size_t base = 0;
  while (environ[base]) base++;
  char **env = calloc(base + n + 1, sizeof *env);
  if (!env) return NULL;
  size_t k = 0;
  for (size_t i = 0; i < base; i++) {
    size_t key = strcspn(environ[i], "=");
    int replaced = 0;
    for (uint32_t j = 0; j < n && !replaced; j++) replaced = strncmp(overrides[j], environ[i], key + 1) == 0;
    if (!replaced) env[k++] = environ[i];
  }
  for (uint32_t j = 0; j < n; j++) env[k++] = overrides[j];
  return env;
}

struct reader { const unsigned char *p, *end; int ok; };

static uint32_t read_u32(struct reader *r) {
  if (r->end - r->p < 4) { r->ok = 0; return 0; }
  uint32_t v = get_u32(r->p);
  r->p += 4;
  return v;
}

/* A length-prefixed string, copied NUL-terminated (NUL inside is refused: argv cannot carry it). */
static char *read_str(struct reader *r) {
  uint32_t len = read_u32(r);
  if (!r->ok || (uint32_t)(r->end - r->p) < len || memchr(r->p, 0, len)) { r->ok = 0; return NULL; }
  char *s = strndup((const char *)r->p, len);
  if (!s) r->ok = 0;
  r->p += len;
  return s;
}

static void free_strs(char **v, uint32_t n) {
  if (!v) return;
  for (uint32_t i = 0; i < n; i++) free(v[i]);
  free(v);
}

static struct command *find(uint32_t id) {
  for (int i = 0; i < MAX_COMMANDS; i++) if (commands[i].used && commands[i].id == id) return &commands[i];
  return NULL;
}

/*
 * 'R' payload: uid, gid, timeout_ms (0: none), grace_ms, argc, envc (u32 each), then argc argv
 * strings, envc "NAME=value" strings and the working directory ("" keeps the container's), each
 * a u32 length and bytes; then u32 has_stdin and, if 1, the rest of the payload is the stdin.
 */
static void run(uint32_t id, const unsigned char *payload, size_t len) {
  struct reader r = {payload, payload + len, 1};
  uint32_t uid = read_u32(&r), gid = read_u32(&r), timeout_ms = read_u32(&r), grace_ms = read_u32(&r);
  uint32_t argc = read_u32(&r), envc = read_u32(&r);
  if (!r.ok || argc == 0 || argc > 65536 || envc > 65536) { send_frame('F', id, "malformed request", 17); return; }
  char **argv = calloc(argc + 1, sizeof *argv), **env = calloc(envc + 1, sizeof *env), *cwd = NULL;
  char **envp = NULL, *stdin_buf = NULL;
  struct command *c = NULL;
  int po[2] = {-1, -1}, pe[2] = {-1, -1}, pi[2] = {-1, -1};
  if (!argv || !env) { send_failure(id, "request", ENOMEM); goto out; }
  for (uint32_t i = 0; i < argc && r.ok; i++) argv[i] = read_str(&r);
  for (uint32_t i = 0; i < envc && r.ok; i++) env[i] = read_str(&r);
  if (r.ok) cwd = read_str(&r);
  uint32_t has_stdin = read_u32(&r);
  if (!r.ok) { send_frame('F', id, "malformed request", 17); goto out; }
  if (uid == 0 || gid == 0) { send_frame('F', id, "refused: root commands go through docker exec", 45); goto out; }
  if (find(id)) { fprintf(stderr, "lego-execd: command id %u is already running; request ignored\n", id); goto out; }
  for (int i = 0; i < MAX_COMMANDS && !c; i++) if (!commands[i].used) c = &commands[i];
  if (!c) { send_failure(id, "too many commands at once", EAGAIN); goto out; }
  if (!(envp = merged_env(env, envc))) { send_failure(id, "request", ENOMEM); goto out; }
  size_t stdin_len = has_stdin ? (size_t)(r.end - r.p) : 0;
  if (stdin_len && !(stdin_buf = malloc(stdin_len))) { send_failure(id, "holding the command's stdin", ENOMEM); goto out; }
  if (stdin_len) memcpy(stdin_buf, r.p, stdin_len);
  if (pipe2(po, O_CLOEXEC) || pipe2(pe, O_CLOEXEC) || (has_stdin && pipe2(pi, O_CLOEXEC))) { send_failure(id, "pipe", errno); goto out; }
  pid_t pid = fork();
  if (pid < 0) { send_failure(id, "fork", errno); goto out; }
  if (pid == 0) {
    setsid(); /* its own process group: a timeout kills the group */
    int devnull = has_stdin ? -1 : open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (dup2(has_stdin ? pi[0] : devnull, 0) < 0 || dup2(po[1], 1) < 0 || dup2(pe[1], 2) < 0) _exit(126);
    become_and_exec(uid, gid, cwd, argv, envp);
  }
  memset(c, 0, sizeof *c);
  c->used = 1;
  c->id = id;
  c->pid = pid;
  c->out = po[0]; po[0] = -1;
  c->err = pe[0]; pe[0] = -1;
  /* Non-blocking: a poll result may name a descriptor number since reused by a newer command. */
  fcntl(c->out, F_SETFL, O_NONBLOCK);
  fcntl(c->err, F_SETFL, O_NONBLOCK);
  c->in = -1;
  if (has_stdin) {
    c->in = pi[1]; pi[1] = -1;
    fcntl(c->in, F_SETFL, O_NONBLOCK);
    c->stdin_len = stdin_len;
    c->stdin_buf = stdin_buf;
    stdin_buf = NULL;
    if (!c->stdin_len) close_fd(&c->in);
  }
  if (timeout_ms) {
    c->deadline_ms = now_ms() + timeout_ms;
    c->hold_until_ms = c->deadline_ms + grace_ms;
  }
out:
  for (int i = 0; i < 2; i++) { close_fd(&po[i]); close_fd(&pe[i]); close_fd(&pi[i]); }
  free(envp);
  free(stdin_buf);
  free_strs(argv, argc);
  free_strs(env, envc);
  free(cwd);
}

static void finish_if_done(struct command *c) {
  if (!c->exited || c->out >= 0 || c->err >= 0) return;
  unsigned char x[6];
  int code = WIFEXITED(c->status) ? WEXITSTATUS(c->status) : WIFSIGNALED(c->status) ? 128 + WTERMSIG(c->status) : 255;
  if (c->held) code = 128 + SIGKILL;
  put_u32(x, (uint32_t)code);
  x[4] = (unsigned char)(c->killed || c->held);
  x[5] = (unsigned char)c->held;
  send_frame('X', c->id, x, sizeof x);
  close_fd(&c->in);
  free(c->stdin_buf);
  memset(c, 0, sizeof *c);
}

static void reap(void) {
  char drain[64];
  while (read(sigchld_pipe[0], drain, sizeof drain) > 0) {}
  int status;
  pid_t pid;
  while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
    for (int i = 0; i < MAX_COMMANDS; i++) {
      struct command *c = &commands[i];
      if (c->used && c->pid == pid && !c->exited) {
        c->exited = 1;
        c->status = status;
        finish_if_done(c);
        break;
      }
    }
  }
}

static void pump_output(struct command *c, int *fd, char type) {
  static char buf[CHUNK];
  ssize_t n = read(*fd, buf, sizeof buf);
  if (n > 0) send_frame(type, c->id, buf, (size_t)n);
  else if (n == 0 || (errno != EINTR && errno != EAGAIN)) close_fd(fd);
}

static void pump_stdin(struct command *c) {
  ssize_t n = write(c->in, c->stdin_buf + c->stdin_off, c->stdin_len - c->stdin_off);
  if (n > 0) c->stdin_off += (size_t)n;
  if ((n < 0 && errno != EAGAIN && errno != EINTR) || c->stdin_off == c->stdin_len) {
    close_fd(&c->in); /* done, or the command closed its stdin */
    free(c->stdin_buf);
    c->stdin_buf = NULL;
  }
}

/* Deadlines: kill the command's group at its timeout; stop waiting for output a grace period later. */
static int64_t enforce_deadlines(void) {
  int64_t now = now_ms(), next = -1;
  for (int i = 0; i < MAX_COMMANDS; i++) {
    struct command *c = &commands[i];
    if (!c->used || !c->deadline_ms) continue;
    if (!c->exited && !c->killed && now >= c->deadline_ms) {
      kill(-c->pid, SIGKILL);
      kill(c->pid, SIGKILL);
      c->killed = 1;
    }
    if (c->exited && now >= c->hold_until_ms && (c->out >= 0 || c->err >= 0)) {
      /* Something that left the command's group holds its output open. */
      close_fd(&c->out);
      close_fd(&c->err);
      c->held = 1;
      finish_if_done(c);
      continue;
    }
    int64_t at;
    if (!c->exited && !c->killed) at = c->deadline_ms;
    else if (c->exited) at = c->hold_until_ms; /* its output is still held open */
    else continue; /* killed: its SIGCHLD wakes the loop */
    int64_t left = at > now ? at - now : 0;
    if (next < 0 || left < next) next = left;
  }
  return next;
}

/* Bytes of the host's stream not yet a whole frame. */
static unsigned char *inbuf;
static size_t inlen, incap;

static void handle_frames(void) {
  size_t off = 0;
  while (inlen - off >= 9) {
    unsigned char *f = inbuf + off;
    uint32_t id = get_u32(f + 1), len = get_u32(f + 5);
    if (len > MAX_FRAME) {
      fprintf(stderr, "lego-execd: a %u-byte frame from the host: the stream is corrupt\n", len);
      exit(2);
    }
    if (inlen - off - 9 < len) break;
    if (f[0] == 'R') run(id, f + 9, len);
    else if (f[0] == 'K') {
      struct command *c = find(id);
      if (c && !c->exited) { kill(-c->pid, SIGKILL); kill(c->pid, SIGKILL); c->killed = 1; }
      if (c) { /* stop waiting for held output a grace period from now, as at a deadline */
        if (!c->deadline_ms) c->deadline_ms = now_ms();
        if (!c->hold_until_ms) c->hold_until_ms = now_ms() + KILL_GRACE_MS;
      }
    } else fprintf(stderr, "lego-execd: unknown frame type %d ignored\n", f[0]);
    off += 9 + (size_t)len;
  }
  memmove(inbuf, inbuf + off, inlen - off);
  inlen -= off;
}

static int read_host(void) {
  if (incap - inlen < CHUNK) {
    size_t cap = incap ? incap * 2 : 4 * CHUNK;
    while (cap - inlen < CHUNK) cap *= 2;
    unsigned char *grown = realloc(inbuf, cap);
    if (!grown) { fprintf(stderr, "lego-execd: out of memory reading a request\n"); exit(2); }
    inbuf = grown;
    incap = cap;
  }
  ssize_t n = read(0, inbuf + inlen, incap - inlen);
  if (n > 0) {
    inlen += (size_t)n;
    handle_frames();
    if (incap > 16 * CHUNK && inlen < CHUNK) { /* give back a large request's buffer */
      unsigned char *small = realloc(inbuf, 4 * CHUNK);
      if (small) { inbuf = small; incap = 4 * CHUNK; }
    }
    return 1;
  }
  return n < 0 && (errno == EINTR || errno == EAGAIN);
}

int main(void) {
  if (geteuid() != 0) {
    fprintf(stderr, "lego-execd: must run as root (with KILL, SETUID, SETGID and SETPCAP) to start commands as their user\n");
    return 2;
  }
  signal(SIGPIPE, SIG_IGN);
  fcntl(1, F_SETFL, fcntl(1, F_GETFL) & ~O_NONBLOCK); /* frames go out whole */
  if (pipe2(sigchld_pipe, O_CLOEXEC | O_NONBLOCK)) { perror("lego-execd: pipe"); return 2; }
  struct sigaction sa = {0};
  sa.sa_handler = on_sigchld;
  sa.sa_flags = SA_RESTART | SA_NOCLDSTOP;
  sigaction(SIGCHLD, &sa, NULL);
  int host_open = 1;
  static struct pollfd fds[2 + 3 * MAX_COMMANDS];
  static struct command *owner[2 + 3 * MAX_COMMANDS];
  static char kind[2 + 3 * MAX_COMMANDS];
  for (;;) {
    int64_t wait = enforce_deadlines();
    int n = 0;
    fds[n] = (struct pollfd){sigchld_pipe[0], POLLIN, 0}; kind[n++] = 's';
    if (host_open) { fds[n] = (struct pollfd){0, POLLIN, 0}; kind[n++] = 'h'; }
    for (int i = 0; i < MAX_COMMANDS; i++) {
      struct command *c = &commands[i];
      if (!c->used) continue;
      if (c->out >= 0) { fds[n] = (struct pollfd){c->out, POLLIN, 0}; owner[n] = c; kind[n++] = 'O'; }
      if (c->err >= 0) { fds[n] = (struct pollfd){c->err, POLLIN, 0}; owner[n] = c; kind[n++] = 'E'; }
      if (c->in >= 0) { fds[n] = (struct pollfd){c->in, POLLOUT, 0}; owner[n] = c; kind[n++] = 'I'; }
    }
    if (poll(fds, (nfds_t)n, wait > INT32_MAX ? INT32_MAX : (int)wait) < 0) {
      if (errno == EINTR) continue;
      perror("lego-execd: poll");
      return 2;
    }
    for (int i = 0; i < n; i++) {
      if (!fds[i].revents) continue;
      struct command *c = owner[i];
      switch (kind[i]) {
        case 's': reap(); break;
        case 'h': host_open = read_host(); break; /* the host detached: commands run on, nothing new comes */
        case 'O': if (c->used && c->out == fds[i].fd) { pump_output(c, &c->out, 'O'); finish_if_done(c); } break;
        case 'E': if (c->used && c->err == fds[i].fd) { pump_output(c, &c->err, 'E'); finish_if_done(c); } break;
        case 'I': if (c->used && c->in == fds[i].fd) pump_stdin(c); break;
      }
    }
  }
}
