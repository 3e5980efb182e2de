// Whole-file reading and atomic writing: the two ways qtrain touches small files (configs' resolved
// copies, metrics, checkpoints, compare's bookkeeping).
#pragma once

#include <optional>
#include <string>

namespace qtrain {

// Writes `bytes` to `path` atomically (temporary file in the same folder, fsync, rename, fsync folder).
// A failure (a full disk) removes the temporary file, leaves `path` as it was, and raises an
// InputError naming the path, the bytes and the room left.
void write_file_atomically(const std::string& path, const std::string& bytes);

// Appends `bytes` to `path` (created if missing) entirely or not at all: a failed write (a full disk)
// cuts the file back to its previous length and raises an InputError as above.
void append_to_file(const std::string& path, const std::string& bytes);

// The whole content of `path`; nullopt when it cannot be opened (missing, unreadable); an InputError
// naming the file when reading fails part-way.
std::optional<std::string> read_whole_file(const std::string& path);

}  // namespace qtrain
