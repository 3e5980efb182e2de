// The safetensors file format (https://github.com/huggingface/safetensors): an 8-byte little-endian
// header length, a JSON header {name: {dtype, shape, data_offsets}, "__metadata__": {...}}, then the
// raw little-endian tensor bytes. Readable by PyTorch (safetensors.torch.load_file) and numpy.
// Writes are atomic (temporary file, fsync, rename, fsync of the folder): a crash leaves either the
// old file or the new one. Reads validate every offset and length against the file size.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "framework/core/tensor.h"

namespace qtrain {

struct NamedTensor {
  std::string name;
  Tensor tensor;  // any device; copied to the host for writing
};

// Metadata values are strings (the format's rule). Two entries are added: "qtrain.crc32" over the data
// bytes and "qtrain.header_crc32" over the header bytes (values passed under these keys are replaced).
void save_safetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                      const std::map<std::string, std::string>& metadata);

class SafetensorsFile {
 public:
  // Loads and validates the whole file; any inconsistency is an InputError naming the file.
  explicit SafetensorsFile(const std::string& path);
  // Validates `bytes`, the whole content of a file, as the constructor above does; `path` names the
  // file in errors.
  SafetensorsFile(const std::vector<uint8_t>& bytes, const std::string& path);

  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  std::string metadata_value(const std::string& key) const;  // error when absent
  bool contains(const std::string& name) const { return entries_.count(name) != 0; }
  std::vector<std::string> names() const;
  // Copies tensor `name` into `dst` (any device), which must have the same dtype and shape.
  void read_into(const std::string& name, Tensor& dst) const;
  Tensor read(const std::string& name) const;  // a new CPU tensor

 private:
  struct Entry {
    DType dtype;
    Shape shape;
    size_t begin, end;
  };
  const Entry& entry(const std::string& name) const;
  std::string path_;
  std::map<std::string, std::string> metadata_;
  std::map<std::string, Entry> entries_;
  std::vector<uint8_t> data_;
};

}  // namespace qtrain
