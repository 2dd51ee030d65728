// deny_chown PROGRAM [ARG]...: runs PROGRAM with every chown system call
// refused (EPERM) by a seccomp filter, as bulkheadd.service's
// SystemCallFilter=~@privileged refuses them, so that tests can meet the
// unit's refusal without a systemd.
#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdio.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#if defined(__x86_64__)
#define NATIVE_ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define NATIVE_ARCH AUDIT_ARCH_AARCH64
#else
#error "deny_chown: add this architecture's AUDIT_ARCH_*"
#endif

#define DENY(nr) BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (nr), 0, 1), BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM)

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: deny_chown PROGRAM [ARG]...\n");
    return 2;
  }
  struct sock_filter filter[] = {
      // Another architecture's system call numbers mean other calls: refuse them all.
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, NATIVE_ARCH, 1, 0),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
#ifdef __NR_chown
      DENY(__NR_chown),
#endif
#ifdef __NR_lchown
      DENY(__NR_lchown),
#endif
      DENY(__NR_fchown),
      DENY(__NR_fchownat),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  struct sock_fprog program = {sizeof filter / sizeof filter[0], filter};
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 || prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &program) != 0) {
    perror("deny_chown: seccomp");
    return 1;
  }
  execv(argv[1], argv + 1);
  perror("deny_chown: exec");
  return 1;
}
