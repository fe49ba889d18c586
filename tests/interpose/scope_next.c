/* tests/interpose/scope_next.c: the definition after scope_lib's. */
int shared_name(void) { return 2; }
int scope_next_marker(void) { return 0; }
