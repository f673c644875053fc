/* Preloaded into the profiled shim: its page-cache warm-up of the agent
 * (POSIX_FADV_WILLNEED) would read every page and hide which ones ran. */
#include <fcntl.h>
int posix_fadvise(int fd, off_t off, off_t len, int advice) { (void)fd; (void)off; (void)len; (void)advice; return 0; }
int posix_fadvise64(int fd, off_t off, off_t len, int advice) { (void)fd; (void)off; (void)len; (void)advice; return 0; }
