/* noop: the smallest program that runs: exit_group(0) and nothing else, no C library, no start-up
 * code. The step image carries it as /bin/noop so a latency benchmark can time the path that starts
 * a process rather than the process (busybox's `true` spends about 460 us of this project's machine
 * on its own start-up and exit, a bare exit about 130 us). */
void _start(void)
{
    __asm__ volatile("xor %edi, %edi\n\t"
                     "mov $231, %eax\n\t"
                     "syscall");
    __builtin_unreachable();
}
