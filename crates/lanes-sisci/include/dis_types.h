/* Forwards to dis/dis_types.h, so that <dis_types.h> works with -I<prefix>/include alone. */
#include "dis/dis_types.h"
