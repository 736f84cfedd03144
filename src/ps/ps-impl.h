/* ps-impl.h - internals of src/ps/ that tests look at. */
#ifndef DTRAIN_PS_IMPL_H
#define DTRAIN_PS_IMPL_H

#include "dtrain/ps.h"

/* Sync mode: gradients summed into the current round so far (tests wait on it instead of
 * sleeping). */
int dt__ps_server_pending(dt_ps_server *s);

#endif
