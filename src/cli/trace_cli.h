/* Shared by `lpo trace` and `lpo report trace`: summarise the raw trace files of a directory. */
#pragma once
#include "lpo/status.h"

/* Loads dir's raw files (and dir/nvml.csv as counter tracks when present), writes the reports into dir
 * and prints a short summary with the post-processing time on stderr. */
lpo_status lpo_trace_cli_summarize(const char *dir, const char *title, const char *step_range, int json);
