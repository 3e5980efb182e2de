// metrics.csv writing.
#include "train/metrics.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>

#include "framework/core/check.h"
#include "framework/core/file_io.h"

namespace qtrain {

std::string MetricsWriter::header() {
  std::string h = "epoch,step,wall_time_s,lr,train_loss,train_accuracy,test_loss,test_accuracy,samples_per_s";
  for (int p = 0; p < PhaseTimers::kCount; ++p) h += fmt::format(",time_{}_s", phase_name(static_cast<Phase>(p)));
  return h + ",bytes_sent,bytes_sent_per_step,hidden_comm_s,exposed_comm_s,fraction_quantized,test_cer,test_wer";
}

MetricsWriter::MetricsWriter(const std::string& path, int64_t keep_through_step) : path_(path) {
  std::error_code ec;
  const bool exists = std::filesystem::exists(path, ec) && std::filesystem::file_size(path, ec) > 0;
  if (exists) {
    const std::optional<std::string> read = read_whole_file(path);
    if (!read) input_error("{}: the existing metrics file cannot be read", path);
    const std::string& text = *read;
    const size_t header_end = std::min(text.find('\n'), text.size());
    if (text.substr(0, header_end) != header())
      input_error("{}: existing metrics file has a different header; move it away or choose another output.dir", path);
    // Rows after the step training continues from are written again, and a last line without its
    // newline was cut by an interrupted write (the next row would continue it): both go.
    std::string kept = header() + "\n";
    bool rewrite = text.back() != '\n';
    for (size_t at = header_end + 1; at < text.size();) {
      const size_t end = text.find('\n', at);
      if (end == std::string::npos) break;  // the cut line
      const std::string line = text.substr(at, end - at);
      at = end + 1;
      const size_t comma = line.find(',');
      const long long step = comma == std::string::npos ? -1 : std::atoll(line.c_str() + comma + 1);
      if (step >= 0 && step <= keep_through_step)
        kept += line + "\n";
      else
        rewrite = true;
    }
    if (rewrite) write_file_atomically(path, kept);
  }
  if (!exists) append_to_file(path, header() + "\n");
}

// One row per call, written whole or not at all (append_to_file): a full disk loses no earlier row.
void MetricsWriter::append(const MetricsRow& r) {
  std::string row =
      fmt::format("{},{},{:.3f},{:.6g},{:.6f},{:.6f},{:.6f},{:.6f},{:.1f}", r.epoch, r.step, r.wall_time_s, r.lr,
                  r.train_loss, r.train_accuracy, r.test_loss, r.test_accuracy, r.samples_per_s);
  for (int p = 0; p < PhaseTimers::kCount; ++p) row += fmt::format(",{:.4f}", r.phases.seconds(static_cast<Phase>(p)));
  row += fmt::format(",{:.0f},{:.0f},{:.4f},{:.4f},{:.6f}", r.bytes_sent, r.bytes_sent_per_step, r.hidden_comm_s,
                     r.exposed_comm_s, r.fraction_quantized);
  auto optional = [](double v) { return std::isnan(v) ? std::string() : fmt::format("{:.6f}", v); };
  row += fmt::format(",{},{}\n", optional(r.test_cer), optional(r.test_wer));  // fmt: GCC 12's false -Wrestrict on +
  append_to_file(path_, row);
}

}  // namespace qtrain
