/*
 * pause.c: the pod sandbox ("pause") process for stepshim's test cluster.
 *
 * It is PID 1 of the pod's sandbox and only holds the pod's namespaces open: it blocks in
 * pause(), reaps any child that ends up parented to it (shared PID namespace pods), and exits
 * cleanly on SIGTERM/SIGINT so the kubelet can stop the sandbox without waiting for SIGKILL.
 * Built with `gcc -static` by images/build-images; no libc beyond the static one.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static void on_term(int sig)
{
	(void)sig;
	_exit(0);
}

static void on_child(int sig)
{
	(void)sig;
	/* Reap every exited child; WNOHANG so a signal with nothing to reap returns at once. */
	while (waitpid(-1, NULL, WNOHANG) > 0)
		;
}

static void install(int sig, void (*handler)(int))
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = handler;
	sa.sa_flags = SA_RESTART | (sig == SIGCHLD ? SA_NOCLDSTOP : 0);
	sigemptyset(&sa.sa_mask);
	if (sigaction(sig, &sa, NULL) != 0) {
		perror("pause: sigaction");
		exit(1);
	}
}

int main(void)
{
	if (getpid() != 1)
		fprintf(stderr, "pause: warning: not running as PID 1\n");
	install(SIGTERM, on_term);
	install(SIGINT, on_term);
	install(SIGCHLD, on_child);
	for (;;)
		pause();
}
