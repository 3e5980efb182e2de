// The table of datasets, built from data/datasets.def: each line there names a dataset whose reader's
// .cpp file defines its descriptor function.
#include <fmt/ranges.h>

#include <array>

#include "data/dataset_info.h"

namespace qtrain {
namespace data_detail {
#define QTRAIN_DATASET(name) const DatasetInfo& name##_dataset_info();
#include "data/datasets.def"
#undef QTRAIN_DATASET
}  // namespace data_detail

namespace {

// A row must describe the dataset its line names, and say what the common code relies on.
void check_row(const DatasetInfo& info, const char* line_name) {
  QT_CHECK(info.name == line_name, "data/datasets.def: the row of line '{}' describes dataset '{}'", line_name,
           info.name);
  QT_CHECK(static_cast<bool>(info.open) && static_cast<bool>(info.parse),
           "data/datasets.def: dataset '{}' lacks its parse or open function", info.name);
  QT_CHECK(info.channels > 0 || !info.no_mean_std.empty(),
           "data/datasets.def: dataset '{}' has no channels but does not say why data.mean does not apply", info.name);
}

const auto& table() {
  static const auto rows = [] {
    std::array rows{
#define QTRAIN_DATASET(name) &data_detail::name##_dataset_info(),
#include "data/datasets.def"
#undef QTRAIN_DATASET
    };
    constexpr std::array line_names{
#define QTRAIN_DATASET(name) #name,
#include "data/datasets.def"
#undef QTRAIN_DATASET
    };
    for (size_t i = 0; i < rows.size(); ++i) check_row(*rows[i], line_names[i]);
    return rows;
  }();
  return rows;
}

}  // namespace

std::span<const DatasetInfo* const> datasets() { return table(); }

std::vector<std::string> dataset_names(const std::function<bool(const DatasetInfo&)>& pred) {
  std::vector<std::string> names;
  for (const DatasetInfo* d : table())
    if (!pred || pred(*d)) names.push_back(d->name);
  return names;
}

const DatasetInfo& dataset_info(const std::string& name) {
  for (const DatasetInfo* d : table())
    if (d->name == name) return *d;
  input_error("unknown dataset '{}' (registered: {})", name, fmt::join(dataset_names(), ", "));
}

std::string applies_only_to(const std::function<bool(const DatasetInfo&)>& has, const std::string& dataset) {
  const std::vector<std::string> names = dataset_names(has);
  if (names.empty()) return fmt::format("applies to no registered dataset, not {}", dataset);
  if (names.size() == 1) return fmt::format("applies to dataset {} only, not {}", names[0], dataset);
  std::string list;
  for (size_t i = 0; i < names.size(); ++i) list += (i == 0 ? "" : i + 1 == names.size() ? " and " : ", ") + names[i];
  return fmt::format("applies to datasets {}, not {}", list, dataset);
}

}  // namespace qtrain
