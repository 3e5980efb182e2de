// ConfigNode: a typed, validating view of one YAML mapping of a config file.
// Every section parser reads its keys through it (each reader names its defaults and ranges in one
// place), then calls finish(), which rejects any key nobody asked for. Every error names the file,
// line and column (or the --set override) and the full key path, e.g.
//   configs/x.yaml:12:7: optimizer.lr must be > 0, got -1
#pragma once

#include <yaml-cpp/yaml.h>

#include <initializer_list>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "framework/core/check.h"

namespace qtrain {

// Where a config came from: the file name and which key paths were overridden on the command line.
struct ConfigSource {
  std::string file;
  std::set<std::string> overridden;  // full key paths, e.g. "train.epochs"
  // Whether line:column positions mean anything to the user: not for a config assembled from
  // command-line words (--methods qsgd:bits=3), whose values were parsed one by one.
  bool positions = true;
};

class ConfigNode {
 public:
  ConfigNode(YAML::Node node, std::string path, std::shared_ptr<const ConfigSource> source);
  // An empty mapping with no source, the value of a section not yet assigned.
  ConfigNode() : ConfigNode(YAML::Node(YAML::NodeType::Map), "", std::make_shared<ConfigSource>()) {}

  const std::string& path() const { return path_; }
  std::string key_path(const std::string& key) const { return path_.empty() ? key : path_ + "." + key; }
  bool has(const std::string& key) const;

  // Scalars. get() returns `fallback` when the key is absent; require() makes it mandatory.
  template <typename T>
  T get(const std::string& key, T fallback);
  template <typename T>
  T require(const std::string& key);
  std::optional<double> get_optional_double(const std::string& key);

  // Range-checked numbers: min <= value (or min < value when min_exclusive) and value <= max.
  double get_double(const std::string& key, double fallback, double min, double max, bool min_exclusive = false);
  int64_t get_int(const std::string& key, int64_t fallback, int64_t min, int64_t max);
  // One of `choices`; the error lists them.
  std::string get_choice(const std::string& key, const std::string& fallback,
                         std::initializer_list<const char*> choices);
  std::string get_choice(const std::string& key, const std::string& fallback, std::span<const std::string> choices);
  std::vector<int64_t> get_int_list(const std::string& key, std::vector<int64_t> fallback, int64_t min, int64_t max);
  std::vector<double> get_double_list(const std::string& key, std::vector<double> fallback);

  // A nested mapping (an empty one when absent) and a sequence of mappings.
  ConfigNode child(const std::string& key);
  std::vector<ConfigNode> items(const std::string& key);
  // An empty mapping standing for `key` (same file, path key_path(key)); for optional blocks given
  // in a short scalar form.
  ConfigNode empty_child(const std::string& key) const {
    return ConfigNode(YAML::Node(YAML::NodeType::Map), key_path(key), source_);
  }
  // Marks `key` as known without reading it (a section another parser owns).
  void accept(const std::string& key);

  // Rejects every key that no get/require/child/items/accept asked for, suggesting the closest known key.
  void finish();

  // "file:line:col" of `key` (or of this mapping when key is empty or absent).
  std::string location(const std::string& key = "") const;
  [[noreturn]] void fail(const std::string& key, const std::string& message) const;

  const YAML::Node& yaml() const { return node_; }

 private:
  YAML::Node lookup(const std::string& key) const;
  template <typename T>
  T convert(const std::string& key, const YAML::Node& value, const char* expected) const;
  // `text` (digits with an optional '-') as a base-10 T; `what` prefixes the message ("entry 2 ").
  template <typename T>
  T decimal_integer(const std::string& key, const std::string& text, const std::string& what) const;

  YAML::Node node_;
  std::string path_;
  std::shared_ptr<const ConfigSource> source_;
  std::set<std::string> known_;
};

// Parses `text` as one YAML document and returns its root (a null node when the text holds none).
// Every YAML text that may come from a user goes through here, never yaml-cpp's Load/LoadFile/LoadAll:
// yaml-cpp 0.7.0's LoadAll loops for ever, filling the memory, when a ',' stands where a value should
// begin (it returns a null document without consuming the comma, then is asked for the next one; qtrain
// issue 24, yaml-cpp #1040), and Load silently drops the rest of the text there. This parser is asked
// for at most three documents. Throws YAML::ParserException, whose mark is the position, for a syntax
// error, for such a token (message "unexpected ','"), for lists and mappings nested more than
// max_yaml_depth levels (yaml-cpp's own limit only says "bad file", at the end of the text) and, as
// YamlSecondDocument, for a second document.
inline constexpr int max_yaml_depth = 100;
struct YamlSecondDocument : YAML::ParserException {
  using YAML::ParserException::ParserException;
};
YAML::Node load_yaml(const std::string& text);

// Loads a YAML file (with a clear error for a missing file or a YAML syntax error) and applies
// command-line overrides "a.b.c=value" (value parsed as YAML; numeric components index sequences).
struct LoadedConfig {
  YAML::Node root;
  std::shared_ptr<ConfigSource> source;
};
LoadedConfig load_config_file(const std::string& file, const std::vector<std::string>& overrides);
void apply_override(YAML::Node root, ConfigSource& source, const std::string& assignment);

}  // namespace qtrain
