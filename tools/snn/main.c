#include <stdio.h>
#include "snn/snn.h"
int main(void) { printf("snn %s\n", snn_version()); return 0; }
