// Suggestions for names that matched nothing ("did you mean ...?").
//
// An option that names a tensor, a pass or a pattern and matches nothing is an error (a typo must
// never be ignored silently); the error names the closest names that do exist. Closeness is an
// edit distance in which a query may be a glob: '*' matches any run of characters for free and
// '?' any one character, so "model.layer.*.weight" is one edit from "model.layers.3.weight".
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace reforge {

// Fewest single-character insertions, deletions and substitutions that make `name` match the
// glob `query` (for a query without '*' or '?', the Levenshtein distance).
size_t glob_edit_distance(const std::string& query, const std::string& name);

// Up to `max` candidates closest to `query`, closest first (ties in candidate order), among those
// close enough to be a plausible typo: at most max(2, k/3) edits, k the number of non-wildcard
// characters in `query`. Duplicates are reported once.
std::vector<std::string> nearest_names(const std::string& query, const std::vector<std::string>& candidates,
                                       size_t max = 3);

// "'a', 'b'" (the names quoted, comma-separated), for error messages.
std::string quoted_list(const std::vector<std::string>& names);

}  // namespace reforge
