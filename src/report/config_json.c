/* A composed config tree written as JSON (maps as objects, lists as arrays, unquoted scalars typed). */
#include "lpo/config.h"
#include "lpo/report.h"

void lpo_json_node(lpo_json *j, const lpo_node *n) {
    if (!n || n->kind == LPO_NODE_NULL) {
        lpo_json_null(j);
        return;
    }
    if (n->kind == LPO_NODE_MAP || n->kind == LPO_NODE_LIST) {
        int map = n->kind == LPO_NODE_MAP;
        if (map)
            lpo_json_object_begin(j);
        else
            lpo_json_array_begin(j);
        // each entry / item
        for (size_t i = 0; i < n->n_items; i++) {
            if (map) lpo_json_key(j, n->items[i]->key);
            lpo_json_node(j, n->items[i]);
        }
        if (map)
            lpo_json_object_end(j);
        else
            lpo_json_array_end(j);
        return;
    }
    int64_t iv;
    double dv;
    int bv;
    if (!n->quoted && lpo_scalar_parse_int(n->value, &iv))
        lpo_json_int(j, iv);
    else if (!n->quoted && lpo_scalar_parse_double(n->value, &dv))
        lpo_json_double(j, dv);
    else if (!n->quoted && lpo_scalar_parse_bool(n->value, &bv))
        lpo_json_bool(j, bv);
    else
        lpo_json_str(j, n->value);
}
