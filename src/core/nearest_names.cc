#include "core/nearest_names.h"

#include <algorithm>
#include <set>

namespace reforge {

size_t glob_edit_distance(const std::string& q, const std::string& s) {
  // d[i][j]: cost of matching q[0, i) against s[0, j); one row at a time.
  std::vector<size_t> prev(s.size() + 1), cur(s.size() + 1);
  for (size_t j = 0; j <= s.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= q.size(); ++i) {
    const char c = q[i - 1];
    cur[0] = c == '*' ? prev[0] : prev[0] + 1;
    for (size_t j = 1; j <= s.size(); ++j) {
      if (c == '*') {
        cur[j] = std::min(prev[j], cur[j - 1]);  // '*' matches nothing more, or one more character
      } else {
        size_t sub = prev[j - 1] + ((c == '?' || c == s[j - 1]) ? 0 : 1);
        cur[j] = std::min({sub, prev[j] + 1, cur[j - 1] + 1});
      }
    }
    std::swap(prev, cur);
  }
  return prev[s.size()];
}

std::vector<std::string> nearest_names(const std::string& query, const std::vector<std::string>& candidates,
                                       size_t max) {
  size_t literal_chars = 0;
  for (char c : query) literal_chars += c != '*' && c != '?';
  const size_t bound = std::max<size_t>(2, literal_chars / 3);
  std::vector<std::pair<size_t, size_t>> scored;  // (distance, candidate index)
  std::set<std::string> seen;
  for (size_t i = 0; i < candidates.size(); ++i) {
    if (!seen.insert(candidates[i]).second) continue;
    size_t d = glob_edit_distance(query, candidates[i]);
    if (d <= bound) scored.emplace_back(d, i);
  }
  std::stable_sort(scored.begin(), scored.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<std::string> out;
  for (size_t k = 0; k < scored.size() && k < max; ++k) out.push_back(candidates[scored[k].second]);
  return out;
}

std::string quoted_list(const std::vector<std::string>& names) {
  std::string s;
  for (const auto& n : names) s += (s.empty() ? "'" : ", '") + n + "'";
  return s;
}

}  // namespace reforge
