// ConfigNode implementation: typed reads, range checks, unknown-key detection, located errors.
#include "framework/core/config_node.h"

#include <fmt/ranges.h>

#include <unordered_map>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <limits>
#include <sstream>

#include <yaml-cpp/eventhandler.h>

#include "framework/core/file_io.h"

namespace qtrain {
namespace {

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j)
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

std::string scalar_text(const YAML::Node& n) {
  if (n.IsScalar()) return "'" + n.Scalar() + "'";
  if (n.IsSequence()) return "a list";
  if (n.IsMap()) return "a mapping";
  return "nothing";
}

std::string join(const std::set<std::string>& names) {
  std::string s;
  for (const auto& n : names) s += (s.empty() ? "" : ", ") + n;
  return s;
}

// Nodes remembered by identity (YAML::Node::is) with a value each, found in constant time: bucketed by
// their position in the text, then compared by identity within the bucket (nodes from another text,
// e.g. a --set value, may share a position). A list of done nodes searched from the start made
// large files quadratic (200k entries took minutes).
template <typename V>
class NodeMemo {
 public:
  const V* find(const YAML::Node& node) const {
    const auto [first, last] = buckets_.equal_range(node.Mark().pos);
    for (auto it = first; it != last; ++it)
      if (it->second.first.is(node)) return &it->second.second;
    return nullptr;
  }
  void add(const YAML::Node& node, V value) {
    buckets_.emplace(node.Mark().pos, std::make_pair(node, std::move(value)));
  }

 private:
  std::unordered_multimap<int, std::pair<YAML::Node, V>> buckets_;
};

// How many places of the document hold `target` (saturating at 2^30). A YAML alias (`*name`) is the
// very node its anchor (`&name`) labels, not a copy, so a node reached through an alias is held in two
// or more places. Each shared mapping or list is counted once and its count remembered: a chain of
// aliases, each listing the previous one twice, makes the tree exponentially larger than the file (the
// "billion laughs"), and a plain walk of it would never end.
int64_t uses_of(const YAML::Node& node, const YAML::Node& target, NodeMemo<int64_t>& counted) {
  if (node.is(target)) return 1;
  if (!node.IsMap() && !node.IsSequence()) return 0;
  if (const int64_t* uses = counted.find(node)) return *uses;
  int64_t uses = 0;
  if (node.IsMap()) {
    for (const auto& kv : node) uses = std::min<int64_t>(uses + uses_of(kv.second, target, counted), 1 << 30);
  } else {
    for (const auto& item : node) uses = std::min<int64_t>(uses + uses_of(item, target, counted), 1 << 30);
  }
  counted.add(node, uses);
  return uses;
}

// "file:line:col" of a node of `origin` (a file), or the --set itself for a value given there.
std::string mark_location(const std::string& origin, const YAML::Mark& mark) {
  if (origin.rfind("--set", 0) == 0 || mark.line < 0) return origin;
  return fmt::format("{}:{}:{}", origin, mark.line + 1, mark.column + 1);
}

// Whether `text` is valid UTF-8 (YAML's encoding; yaml-cpp passes other bytes through, and they
// later broke the JSON of the checkpoint's metadata, after the whole training run).
bool valid_utf8(const std::string& text) {
  for (size_t i = 0; i < text.size();) {
    const auto c = static_cast<unsigned char>(text[i]);
    const size_t len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xe ? 3 : (c >> 3) == 0x1e ? 4 : 0;
    if (len == 0 || i + len > text.size()) return false;
    uint32_t cp = len == 1 ? c : c & (0x7f >> len);
    for (size_t k = 1; k < len; ++k) {
      const auto cc = static_cast<unsigned char>(text[i + k]);
      if ((cc >> 6) != 0x2) return false;
      cp = (cp << 6) | (cc & 0x3f);
    }
    // Overlong forms, surrogates and values past U+10FFFF are not UTF-8.
    if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
        (cp >= 0xd800 && cp <= 0xdfff) || cp > 0x10ffff)
      return false;
    i += len;
  }
  return true;
}

void check_text(const YAML::Node& scalar, const std::string& origin) {
  if (!valid_utf8(scalar.Scalar()))
    input_error("{}: the text is not valid UTF-8 (save the config as UTF-8)", mark_location(origin, scalar.Mark()));
  // A NUL ("\0" in a quoted YAML string) would end a path or a name early wherever it reaches the
  // system (open() reads up to it), so "data\0x" would open "data".
  if (scalar.Scalar().find('\0') != std::string::npos)
    input_error("{}: the text holds a NUL character (\\0), which no path, name or value may contain",
                mark_location(origin, scalar.Mark()));
}

// `text` with control characters written as \xNN, for messages that quote a path given by the user.
std::string printable(const std::string& text) {
  std::string out;
  for (const char c : text) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f)
      out += fmt::format("\\x{:02x}", static_cast<unsigned char>(c));
    else
      out += c;
  }
  return out;
}

// Rejects what yaml-cpp accepts but no config can mean: a key given twice in one mapping (yaml-cpp
// keeps both and every lookup finds the first, so the second would be ignored without a word), a key
// that is a list or a mapping, text that is not UTF-8, and an anchor whose node contains an alias of
// itself (a cycle, which every walk of the tree would follow until the stack overflows). `path` holds
// the mappings and lists being walked (for the cycle), `checked` those done: a node shared through
// aliases is checked once.
void check_structure(const YAML::Node& node, const std::string& origin, std::vector<YAML::Node>& path,
                     NodeMemo<bool>& checked) {
  if (node.IsScalar()) check_text(node, origin);
  if (!node.IsMap() && !node.IsSequence()) return;
  for (const YAML::Node& open : path)
    if (open.is(node))
      input_error(
          "{}: the node anchored here contains an alias of itself (a cycle); an alias may only name a "
          "node outside it",
          mark_location(origin, node.Mark()));
  if (checked.find(node)) return;
  path.push_back(node);
  if (node.IsMap()) {
    std::unordered_map<std::string, YAML::Mark> keys;
    for (const auto& kv : node) {
      if (!kv.first.IsScalar())
        input_error("{}: a key must be a plain name, got {}", mark_location(origin, kv.first.Mark()),
                    kv.first.IsSequence() ? "a list"
                    : kv.first.IsMap()    ? "a mapping"
                                          : "an empty key");
      check_text(kv.first, origin);
      const std::string& key = kv.first.Scalar();
      const auto [earlier, fresh] = keys.emplace(key, kv.first.Mark());
      if (!fresh)
        input_error("{}: duplicate key '{}' (first given at {}); a key may appear only once in a mapping",
                    mark_location(origin, kv.first.Mark()), key, mark_location(origin, earlier->second));
      check_structure(kv.second, origin, path, checked);
    }
  } else {
    for (const auto& item : node) check_structure(item, origin, path, checked);
  }
  path.pop_back();
  checked.add(node, true);
}

void check_structure(const YAML::Node& root, const std::string& origin) {
  std::vector<YAML::Node> path;
  NodeMemo<bool> checked;
  check_structure(root, origin, path, checked);
}

// Watches the parser's events for load_yaml: where each document begins, and how deeply lists and
// mappings nest (refused past max_yaml_depth, at the collection that goes too deep). Builds nothing.
class DocumentProbe : public YAML::EventHandler {
 public:
  YAML::Mark start;  // of the latest document: the position of its first token

  void OnDocumentStart(const YAML::Mark& mark) override { start = mark, depth_ = 0; }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t, const std::string&) override {}
  void OnSequenceStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {
    open(mark);
  }
  void OnSequenceEnd() override { --depth_; }
  void OnMapStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {
    open(mark);
  }
  void OnMapEnd() override { --depth_; }

 private:
  void open(const YAML::Mark& mark) {
    if (++depth_ > max_yaml_depth)
      throw YAML::ParserException(
          mark, fmt::format("lists and mappings are nested more than {} levels deep", max_yaml_depth));
  }
  int depth_ = 0;
};

// The error for a token the parser cannot use where a document's value should begin.
[[noreturn]] void throw_unusable_token(const std::string& text, const YAML::Mark& mark) {
  const size_t pos = static_cast<size_t>(std::max(mark.pos, 0));
  const std::string token = pos < text.size() ? text.substr(pos, 1) : std::string();
  throw YAML::ParserException(
      mark, token == "," ? std::string("unexpected ',' where a value should begin (a comma separates entries only "
                                       "inside [ ] or { })")
                         : fmt::format("unexpected '{}' where a value should begin", token));
}

}  // namespace

YAML::Node load_yaml(const std::string& text) {
  // A document that starts where the previous one started consumed no token: the parser stands on one
  // it cannot use, and would return a null document for it for ever. Any document that is not stuck
  // consumes at least its first token (a `---`, or the value's). So two documents tell whether the
  // first is stuck, a third whether the second is; no more are read.
  {
    std::istringstream in(text);
    YAML::Parser parser(in);
    DocumentProbe probe;
    if (!parser.HandleNextDocument(probe)) return YAML::Node();
    const YAML::Mark first = probe.start;
    if (parser.HandleNextDocument(probe)) {
      if (probe.start.pos == first.pos) throw_unusable_token(text, first);
      const YAML::Mark second = probe.start;
      if (parser.HandleNextDocument(probe) && probe.start.pos == second.pos) throw_unusable_token(text, second);
      throw YamlSecondDocument(second, "a second YAML document begins here; one document is expected");
    }
  }
  // Exactly one document, which the probe has parsed without error: yaml-cpp builds its nodes (with
  // their positions, which only its own builder can set) reading that one document.
  return YAML::Load(text);
}

ConfigNode::ConfigNode(YAML::Node node, std::string path, std::shared_ptr<const ConfigSource> source)
    : node_(node), path_(std::move(path)), source_(std::move(source)) {
  if (node_.IsDefined() && !node_.IsNull() && !node_.IsMap())
    fail("", fmt::format("expected a mapping of keys, got {}", scalar_text(node_)));
}

YAML::Node ConfigNode::lookup(const std::string& key) const {
  // Const access: a non-const operator[] would insert the key.
  const YAML::Node& n = node_;
  if (!n.IsDefined() || !n.IsMap()) return YAML::Node(YAML::NodeType::Undefined);
  YAML::Node v = n[key];
  return v;
}

bool ConfigNode::has(const std::string& key) const {
  YAML::Node v = lookup(key);
  return v.IsDefined() && !v.IsNull();
}

std::string ConfigNode::location(const std::string& key) const {
  const std::string full = key.empty() ? path_ : key_path(key);
  for (const auto& o : source_->overridden)
    if (!full.empty() && (full == o || full.rfind(o + ".", 0) == 0)) return fmt::format("command line (--set {})", o);
  YAML::Node v = key.empty() ? node_ : lookup(key);
  const YAML::Node& at = v.IsDefined() ? v : node_;
  if (source_->positions && at.IsDefined() && at.Mark().line >= 0)
    return fmt::format("{}:{}:{}", source_->file, at.Mark().line + 1, at.Mark().column + 1);
  return source_->file;
}

void ConfigNode::fail(const std::string& key, const std::string& message) const {
  const std::string full = key.empty() ? path_ : key_path(key);
  throw InputError(fmt::format("{}: {}{}", location(key), full.empty() ? "" : full + " ", message));
}

template <typename T>
T ConfigNode::convert(const std::string& key, const YAML::Node& value, const char* expected) const {
  if (!value.IsScalar()) fail(key, fmt::format("must be {}, got {}", expected, scalar_text(value)));
  try {
    return value.as<T>();
  } catch (const YAML::Exception&) {
    fail(key, fmt::format("must be {}, got {}", expected, scalar_text(value)));
  }
}

// Integers are read in base 10 whatever their leading zeros: yaml-cpp follows YAML 1.1 and reads
// "012" as octal 10 and fails on "028", where a config's author (and YAML 1.2) means twelve and 28.
template <typename T>
T ConfigNode::decimal_integer(const std::string& key, const std::string& text, const std::string& what) const {
  T x{};
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, x, 10);
  if (ec == std::errc::result_out_of_range)
    fail(key, fmt::format("{}must be an integer in [{}, {}], got {}", what, std::numeric_limits<T>::min(),
                          std::numeric_limits<T>::max(), text));
  if (ec != std::errc() || ptr != end) fail(key, fmt::format("{}must be an integer, got {}", what, text));
  return x;
}

template <typename T>
T ConfigNode::get(const std::string& key, T fallback) {
  known_.insert(key);
  YAML::Node v = lookup(key);
  if (!v.IsDefined() || v.IsNull()) return fallback;
  if constexpr (std::is_same_v<T, bool>)
    return convert<bool>(key, v, "true or false");
  else if constexpr (std::is_same_v<T, std::string>)
    return convert<std::string>(key, v, "a string");
  else if constexpr (std::is_integral_v<T>) {
    // yaml-cpp accepts "1e3" for integers inconsistently; require digits only.
    const std::string& s = v.IsScalar() ? v.Scalar() : std::string();
    const bool digits = !s.empty() && std::all_of(s.begin() + (s[0] == '-' ? 1 : 0), s.end(), ::isdigit) && s != "-";
    if (!digits) fail(key, fmt::format("must be an integer, got {}", scalar_text(v)));
    return decimal_integer<T>(key, s, "");
  } else {
    return convert<T>(key, v, "a number");
  }
}

template <typename T>
T ConfigNode::require(const std::string& key) {
  known_.insert(key);
  if (!has(key)) fail(key, "is required but missing");
  return get<T>(key, T{});
}

template bool ConfigNode::get<bool>(const std::string&, bool);
template std::string ConfigNode::get<std::string>(const std::string&, std::string);
template int ConfigNode::get<int>(const std::string&, int);
template int64_t ConfigNode::get<int64_t>(const std::string&, int64_t);
template uint64_t ConfigNode::get<uint64_t>(const std::string&, uint64_t);
template double ConfigNode::get<double>(const std::string&, double);
template std::string ConfigNode::require<std::string>(const std::string&);
template int64_t ConfigNode::require<int64_t>(const std::string&);
template double ConfigNode::require<double>(const std::string&);

std::optional<double> ConfigNode::get_optional_double(const std::string& key) {
  known_.insert(key);
  if (!has(key)) return std::nullopt;
  return get<double>(key, 0.0);
}

double ConfigNode::get_double(const std::string& key, double fallback, double min, double max, bool min_exclusive) {
  const double v = get<double>(key, fallback);
  if (!std::isfinite(v)) fail(key, fmt::format("must be a finite number, got {}", v));
  if (min_exclusive ? !(v > min) : !(v >= min))
    fail(key, fmt::format("must be {} {}, got {}", min_exclusive ? ">" : ">=", min, v));
  if (!(v <= max)) fail(key, fmt::format("must be <= {}, got {}", max, v));
  return v;
}

int64_t ConfigNode::get_int(const std::string& key, int64_t fallback, int64_t min, int64_t max) {
  const int64_t v = get<int64_t>(key, fallback);
  if (v < min) fail(key, fmt::format("must be >= {}, got {}", min, v));
  if (v > max) fail(key, fmt::format("must be <= {}, got {}", max, v));
  return v;
}

std::string ConfigNode::get_choice(const std::string& key, const std::string& fallback,
                                   std::initializer_list<const char*> choices) {
  const std::vector<std::string> names(choices.begin(), choices.end());
  return get_choice(key, fallback, names);
}

std::string ConfigNode::get_choice(const std::string& key, const std::string& fallback,
                                   std::span<const std::string> choices) {
  std::string v = get<std::string>(key, fallback);
  for (const std::string& c : choices)
    if (v == c) return v;
  fail(key, fmt::format("must be one of {}, got '{}'", fmt::join(choices, ", "), v));
}

std::vector<int64_t> ConfigNode::get_int_list(const std::string& key, std::vector<int64_t> fallback, int64_t min,
                                              int64_t max) {
  known_.insert(key);
  YAML::Node v = lookup(key);
  if (!v.IsDefined() || v.IsNull()) return fallback;
  if (!v.IsSequence()) fail(key, fmt::format("must be a list of integers, got {}", scalar_text(v)));
  std::vector<int64_t> out;
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string& s = v[i].IsScalar() ? v[i].Scalar() : std::string();
    const bool digits = !s.empty() && std::all_of(s.begin() + (s[0] == '-' ? 1 : 0), s.end(), ::isdigit);
    if (!digits) fail(key, fmt::format("entry {} must be an integer, got {}", i, scalar_text(v[i])));
    const auto x = decimal_integer<int64_t>(key, s, fmt::format("entry {} ", i));
    if (x < min || x > max) fail(key, fmt::format("entry {} must be in [{}, {}], got {}", i, min, max, x));
    out.push_back(x);
  }
  return out;
}

std::vector<double> ConfigNode::get_double_list(const std::string& key, std::vector<double> fallback) {
  known_.insert(key);
  YAML::Node v = lookup(key);
  if (!v.IsDefined() || v.IsNull()) return fallback;
  if (!v.IsSequence()) fail(key, fmt::format("must be a list of numbers, got {}", scalar_text(v)));
  std::vector<double> out;
  for (size_t i = 0; i < v.size(); ++i) {
    try {
      out.push_back(v[i].as<double>());
    } catch (const YAML::Exception&) {
      fail(key, fmt::format("entry {} must be a number, got {}", i, scalar_text(v[i])));
    }
  }
  return out;
}

ConfigNode ConfigNode::child(const std::string& key) {
  known_.insert(key);
  YAML::Node v = lookup(key);
  if (v.IsDefined() && !v.IsNull() && !v.IsMap())
    fail(key, fmt::format("must be a mapping of keys, got {}", scalar_text(v)));
  return ConfigNode(v.IsDefined() && !v.IsNull() ? v : YAML::Node(YAML::NodeType::Map), key_path(key), source_);
}

std::vector<ConfigNode> ConfigNode::items(const std::string& key) {
  known_.insert(key);
  YAML::Node v = lookup(key);
  std::vector<ConfigNode> out;
  if (!v.IsDefined() || v.IsNull()) return out;
  if (!v.IsSequence()) fail(key, fmt::format("must be a list, got {}", scalar_text(v)));
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string p = key_path(key) + "." + std::to_string(i);
    if (!v[i].IsMap()) ConfigNode(YAML::Node(YAML::NodeType::Map), p, source_).fail("", "must be a mapping");
    out.emplace_back(v[i], p, source_);
  }
  return out;
}

void ConfigNode::accept(const std::string& key) { known_.insert(key); }

void ConfigNode::finish() {
  if (!node_.IsDefined() || !node_.IsMap()) return;
  for (auto it = node_.begin(); it != node_.end(); ++it) {
    const std::string key = it->first.as<std::string>();
    if (known_.count(key)) continue;
    std::string best;
    size_t best_d = 3;  // suggest only close matches
    for (const auto& k : known_) {
      const size_t d = edit_distance(key, k);
      if (d < best_d) best_d = d, best = k;
    }
    const std::string hint = best.empty() ? "" : fmt::format(" (did you mean '{}'?)", best);
    // Point at the key itself (location(key) would point at its value).
    const YAML::Mark mark = it->first.Mark();
    std::string where = location(key).rfind("command line", 0) == 0 || mark.line < 0 || !source_->positions
                            ? location(key)
                            : fmt::format("{}:{}:{}", source_->file, mark.line + 1, mark.column + 1);
    // A key without a position in the file was made by a --set (`--set a.b=1` creates section a).
    if (mark.line < 0)
      for (const auto& o : source_->overridden)
        if (o.rfind(key_path(key) + ".", 0) == 0) where = fmt::format("command line (--set {})", o);
    throw InputError(
        fmt::format("{}: unknown key '{}'{}; known keys here: {}", where, key_path(key), hint, join(known_)));
  }
}

LoadedConfig load_config_file(const std::string& file, const std::vector<std::string>& overrides) {
  LoadedConfig out;
  out.source = std::make_shared<ConfigSource>();
  out.source->file = file;
  if (std::filesystem::is_directory(file)) input_error("{}: is a folder, not a config file", printable(file));
  if (!std::filesystem::is_regular_file(file)) input_error("{}: config file not found", printable(file));
  const std::optional<std::string> text = read_whole_file(file);
  if (!text) input_error("{}: cannot read config: cannot open the file", file);
  try {
    // One document only: yaml-cpp's LoadFile read the first and ignored the others without a word (a
    // config followed by `---` and another one trained the first).
    out.root = load_yaml(*text);
  } catch (const YamlSecondDocument& e) {
    input_error("{}:{}:{}: a second YAML document begins here; a config is one document", file, e.mark.line + 1,
                e.mark.column + 1);
  } catch (const YAML::ParserException& e) {
    input_error("{}:{}:{}: YAML syntax error: {}", file, e.mark.line + 1, e.mark.column + 1, e.msg);
  } catch (const YAML::Exception& e) {
    input_error("{}: cannot read config: {}", file, e.what());
  }
  if (!out.root.IsMap()) input_error("{}: a config must be a YAML mapping of sections (name, data, model, ...)", file);
  check_structure(out.root, file);
  for (const auto& o : overrides) apply_override(out.root, *out.source, o);
  return out;
}

namespace {
// `k` as an index into a list of `size` entries, or -1 when it is not one (too long for stoul too).
int64_t list_index(const std::string& k, size_t size) {
  if (k.empty() || k.size() > 9 || !std::all_of(k.begin(), k.end(), ::isdigit)) return -1;
  const auto i = static_cast<size_t>(std::stoul(k));
  return i < size ? static_cast<int64_t>(i) : -1;
}
}  // namespace

void apply_override(YAML::Node root, ConfigSource& source, const std::string& assignment) {
  const size_t eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0)
    input_error("--set {}: expected key.path=value, e.g. --set train.epochs=2", assignment);
  const std::string path = assignment.substr(0, eq);
  const std::string text = assignment.substr(eq + 1);
  // YAML reads nothing as null, and a null key takes its default: `--set output.dir=` (a shell variable
  // that was empty) trained into runs/<name> without a word.
  if (text.find_first_not_of(" \t") == std::string::npos)
    input_error("--set {}=: the value is empty; give one (or 'null' for the key's default)", path);
  std::vector<std::string> parts;
  for (size_t start = 0;;) {
    const size_t dot = path.find('.', start);
    parts.push_back(path.substr(start, dot - start));
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  YAML::Node value;
  try {
    value = load_yaml(text);
  } catch (const YAML::Exception& e) {
    input_error("--set {}: the value '{}' is not valid YAML: {}", path, text, e.what());
  }
  check_structure(value, "--set " + path);
  // Walk with explicit node handles; yaml-cpp's assignment semantics make `cur = cur[k]` rebind.
  std::vector<YAML::Node> chain{root};
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    YAML::Node cur = chain.back();
    const std::string& k = parts[i];
    if (cur.IsSequence()) {
      const int64_t index = list_index(k, cur.size());
      if (index < 0) input_error("--set {}: '{}' must index the list (0..{})", path, k, cur.size() - 1);
      YAML::Node entry = cur[static_cast<size_t>(index)];
      if (entry.IsScalar()) input_error("--set {}: '{}' is a value, not a section", path, k);
      chain.push_back(entry);
    } else {
      if (!cur[k].IsDefined() || cur[k].IsNull()) cur[k] = YAML::Node(YAML::NodeType::Map);
      if (cur[k].IsScalar()) input_error("--set {}: '{}' is a value, not a section", path, k);
      chain.push_back(cur[k]);
    }
  }
  YAML::Node parent = chain.back();
  const std::string& last = parts.back();
  // yaml-cpp assigns through shared nodes, so overriding one use of an alias would silently change
  // every use of it (and the anchor's own entry). Refuse instead: the user edits the file.
  if (parent.IsMap() && parent[last].IsDefined())
    chain.push_back(parent[last]);
  else if (parent.IsSequence() && list_index(last, parent.size()) >= 0)
    chain.push_back(parent[static_cast<size_t>(list_index(last, parent.size()))]);
  for (size_t i = 1; i < chain.size(); ++i) {
    NodeMemo<int64_t> counted;
    const int64_t uses = uses_of(root, chain[i], counted);
    if (uses > 1) {
      std::string prefix = parts[0];
      for (size_t j = 1; j < i; ++j) prefix += "." + parts[j];
      input_error(
          "--set {}: '{}' is a YAML alias: the node {}:{}:{} is used in {} places, and --set would change "
          "all of them. Change the value in the file, or write this entry out instead of the alias",
          path, prefix, source.file, chain[i].Mark().line + 1, chain[i].Mark().column + 1, uses);
    }
  }
  if (parent.IsSequence()) {
    const int64_t index = list_index(last, parent.size());
    if (index < 0) input_error("--set {}: '{}' must index the list (0..{})", path, last, parent.size() - 1);
    parent[static_cast<size_t>(index)] = value;
  } else {
    parent[last] = value;
  }
  source.overridden.insert(path);
}

}  // namespace qtrain
