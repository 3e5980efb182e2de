// metrics.csv writing.
#include "framework/metrics.h"

#include <filesystem>
#include <fmt/format.h>

#include "framework/check.h"

namespace qtrain {

std::string MetricsWriter::header() {
  std::string h = "epoch,step,wall_time_s,lr,train_loss,train_accuracy,test_loss,test_accuracy,samples_per_s";
  for (int p = 0; p < PhaseTimers::kCount; ++p) h += fmt::format(",time_{}_s", phase_name(static_cast<Phase>(p)));
  return h + ",bytes_sent,bytes_sent_per_step,hidden_comm_s,exposed_comm_s,fraction_quantized,test_cer,test_wer";
}

MetricsWriter::MetricsWriter(const std::string& path) : path_(path) {
  const bool exists = std::filesystem::exists(path) && std::filesystem::file_size(path) > 0;
  if (exists) {
    std::ifstream in(path);
    std::string first;
    std::getline(in, first);
    if (first != header())
      input_error("{}: existing metrics file has a different header; move it away or choose another output.dir", path);
  }
  out_.open(path, std::ios::app);
  if (!out_) input_error("{}: cannot open for writing", path);
  if (!exists) out_ << header() << "\n" << std::flush;
}

void MetricsWriter::append(const MetricsRow& r) {
  out_ << fmt::format("{},{},{:.3f},{:.6g},{:.6f},{:.6f},{:.6f},{:.6f},{:.1f}", r.epoch, r.step, r.wall_time_s, r.lr,
                      r.train_loss, r.train_accuracy, r.test_loss, r.test_accuracy, r.samples_per_s);
  for (int p = 0; p < PhaseTimers::kCount; ++p) out_ << fmt::format(",{:.4f}", r.phases.seconds(static_cast<Phase>(p)));
  out_ << fmt::format(",{:.0f},{:.0f},{:.4f},{:.4f},{:.6f}", r.bytes_sent, r.bytes_sent_per_step, r.hidden_comm_s,
                      r.exposed_comm_s, r.fraction_quantized);
  auto optional = [](double v) { return std::isnan(v) ? std::string() : fmt::format("{:.6f}", v); };
  out_ << "," << optional(r.test_cer) << "," << optional(r.test_wer) << "\n" << std::flush;
}

}  // namespace qtrain
