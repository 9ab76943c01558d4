/* Internals shared by the src/config/ files (not part of the public API). */
#pragma once
#include "lpo/config.h"

/* The deepest a configuration nests: YAML files (nesting levels), override keys and package paths (dotted
 * components). Every recursive walk of a tree (merge, resolve, dump, free) stays this deep. */
#define LPO_CFG_MAX_DEPTH 128

void lpo__node_set_origin(lpo_node *n, const char *origin);
void lpo__node_set_value(lpo_node *n, const char *value);
void lpo__node_set_key(lpo_node *n, const char *key);
/* Replaces dst's content with src's (dst keeps its key and place); frees src. */
void lpo__node_replace(lpo_node *dst, lpo_node *src);
/* Removes and frees child from map (or list); returns 1 when it was there. */
int lpo__node_remove_child(lpo_node *map, const lpo_node *child);

/* Parses an override's value text: [..]/{..} flow YAML, '..'/".." quoted, null/~ or plain text. */
lpo_status lpo__parse_value(const char *text, const char *origin, lpo_node **out);
/* Deep merge: maps merge key by key, anything else in src replaces dst. Consumes src. */
void lpo__merge(lpo_node *dst, lpo_node *src);
/* Resolves every ${...} in the tree in place. */
lpo_status lpo__resolve(lpo_node *root);
/* Collects the dotted paths of every node of the tree (for suggestions); free with lpo__paths_free. */
void lpo__paths(const lpo_node *root, char ***paths, size_t *n);
void lpo__paths_free(char **paths, size_t n);
/* "Y-m-d..." formatted with the one timestamp of this process (all ${now:} agree). */
void lpo__now_format(const char *fmt, char *out, size_t n);
