/* Internals shared by the profile runner's files (profile.c: timing pass; profile_ops.c: breakdown pass). */
#pragma once
#include "lpo/profile.h"

/* Draws the progress bar (when o->progress): done of total units, a label, elapsed seconds. */
void lpo_pf__progress(const lpo_pf_opts *o, size_t done, size_t total, const char *what, double elapsed_s);
/* The eager pass timing every plan group of one batch; may close *e and reopen it in eager mode. embeds:
 * NULL, or per sequence of the batch the image embeddings of its prefill (a page workload). */
lpo_status lpo_pf__breakdown(lpo_engine **e, const lpo_pf_request *rq, lpo_pf_result *r,
                             const lpo_engine_embeds *embeds, uint64_t t_start);
