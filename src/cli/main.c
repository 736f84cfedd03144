#include <stdio.h>
int main(void) { puts("dtrain"); return 0; }
