// Expansion of repeat blocks and resolution of `inputs:` names (rules in layer_graph.h).
#include "framework/model/layer_graph.h"

#include <map>
#include <optional>
#include <set>

namespace qtrain {
namespace {

constexpr size_t kMaxLayers = 1 << 16;

// The names visible in one block repetition (or the top level) and where its layers read from.
struct Scope {
  std::string prefix;                      // "stage1_block3." ("" at the top level)
  int input = kNetInput;                   // what `input` means here
  int last = kNetInput;                    // the latest entry's output: the default input
  std::map<std::string, int> names;        // names relative to this scope -> node index
  std::map<std::string, int> type_counts;  // for default names: dense1, dense2, ...
  Scope* parent = nullptr;
};

// An unresolved input name. The first one is reported after the whole list has been expanded, so
// the message can tell a forward reference (the name exists later) from a name that does not exist.
struct Unresolved {
  ConfigNode cfg;
  std::string layer;                    // full name of the layer whose input it is
  std::string name;                     // as written
  std::vector<std::string> candidates;  // the full names it could have meant, innermost scope first
  std::vector<std::string> visible;     // what it could have named instead
};

class Expander {
 public:
  std::vector<GraphNode> run(const std::vector<ConfigNode>& layers) {
    Scope top;
    expand(layers, top);
    if (unresolved_) report(*unresolved_);
    check_every_output_used();
    return std::move(nodes_);
  }

 private:
  void expand(const std::vector<ConfigNode>& items, Scope& scope) {
    for (const ConfigNode& item : items) {
      const ConfigNode& cfg = item;
      if (cfg.has("repeat") || cfg.has("layers"))
        add_block(cfg, scope);
      else
        add_layer(cfg, scope);
    }
  }

  static void check_name(ConfigNode& cfg, const std::string& name, const char* what) {
    if (name.empty() || name.find('.') != std::string::npos || name == "input")
      cfg.fail("name", fmt::format("'{}' is not a valid {} name: it must be non-empty, without '.', and not 'input'",
                                   name, what));
  }

  // `inputs:` as a list of names (a single name is a list of one); empty when absent.
  static std::vector<std::string> read_input_names(ConfigNode& cfg) {
    cfg.accept("inputs");
    if (!cfg.has("inputs")) return {};
    const YAML::Node v = cfg.yaml()["inputs"];
    std::vector<std::string> names;
    if (v.IsScalar()) {
      names.push_back(v.as<std::string>());
    } else if (v.IsSequence() && v.size() > 0) {
      for (size_t i = 0; i < v.size(); ++i) {
        if (!v[i].IsScalar()) cfg.fail("inputs", fmt::format("entry {} must be a layer name", i));
        names.push_back(v[i].as<std::string>());
      }
    } else {
      cfg.fail("inputs", "must be a layer name or a non-empty list of layer names (or 'input')");
    }
    return names;
  }

  int resolve(const ConfigNode& cfg, const std::string& layer, const std::string& name, const Scope& scope) {
    if (name == "input") return scope.input;
    for (const Scope* s = &scope; s; s = s->parent) {
      auto it = s->names.find(name);
      if (it != s->names.end()) return it->second;
    }
    if (!unresolved_) {
      Unresolved u{cfg, layer, name, {}, {"input"}};
      for (const Scope* s = &scope; s; s = s->parent) u.candidates.push_back(s->prefix + name);
      for (const auto& [n, index] : scope.names) u.visible.push_back(n);
      unresolved_ = std::move(u);
    }
    return scope.last;  // a stand-in so expansion can go on and learn every name
  }

  void define(const std::string& full, int index, Scope& scope) {
    for (Scope* s = &scope; s; s = s->parent) s->names[full.substr(s->prefix.size())] = index;
    scope.last = index;
  }

  void add_layer(ConfigNode cfg, Scope& scope) {
    // Nested repeat counts multiply: stop expanding long before memory or time run out (ResNet-1202,
    // the deepest shipped model family, has about 4000 layers).
    if (nodes_.size() >= kMaxLayers)
      cfg.fail("", fmt::format("would be layer {} of the expanded model, more than the {} allowed; check the repeat "
                               "counts of the enclosing blocks",
                               nodes_.size() + 1, kMaxLayers));
    const std::string type = cfg.require<std::string>("type");
    std::string name;
    if (cfg.has("name")) {
      name = cfg.get<std::string>("name", "");
      check_name(cfg, name, "layer");
    } else {
      name = type + std::to_string(++scope.type_counts[type]);
    }
    cfg.accept("name");
    const std::string full = scope.prefix + name;
    if (!all_names_.insert(full).second) cfg.fail("name", fmt::format("duplicate layer name '{}'", full));
    GraphNode node{cfg, type, full, {}};
    for (const std::string& n : read_input_names(node.cfg)) node.inputs.push_back(resolve(cfg, full, n, scope));
    if (node.inputs.empty()) node.inputs.push_back(scope.last);
    nodes_.push_back(std::move(node));
    define(full, static_cast<int>(nodes_.size()) - 1, scope);
  }

  void add_block(ConfigNode cfg, Scope& scope) {
    const int64_t repeat = cfg.get_int("repeat", 1, 1, 1 << 20);
    if (!cfg.has("name")) cfg.fail("name", "is required for a repeat block: its layers are named <name><r>.<layer>");
    const std::string name = cfg.get<std::string>("name", "");
    check_name(cfg, name, "block");
    if (!blocks_.insert(scope.prefix + name).second)
      cfg.fail("name", fmt::format("duplicate block name '{}'", scope.prefix + name));
    const std::vector<ConfigNode> items = cfg.items("layers");
    if (items.empty()) cfg.fail("layers", "must list the block's layers");
    const std::vector<std::string> input_names = read_input_names(cfg);
    if (input_names.size() > 1) cfg.fail("inputs", "a repeat block reads one input");
    cfg.finish();  // a block takes no other keys (a `type` here is a mistake worth naming)
    int current = input_names.empty() ? scope.last : resolve(cfg, scope.prefix + name, input_names[0], scope);
    for (int64_t r = 1; r <= repeat; ++r) {
      Scope inner;
      inner.prefix = scope.prefix + name + std::to_string(r) + ".";
      inner.input = inner.last = current;
      inner.parent = &scope;
      expand(items, inner);
      current = inner.last;
    }
    scope.last = current;
  }

  [[noreturn]] void report(const Unresolved& u) const {
    for (const std::string& c : u.candidates)
      if (all_names_.count(c))
        u.cfg.fail("inputs", fmt::format("of layer '{}' names '{}', which comes later in the list; inputs must name "
                                         "earlier layers (config order is the execution order)",
                                         u.layer, u.name));
    std::string visible;
    for (size_t i = 0; i < u.visible.size() && i < 12; ++i) visible += (i ? ", " : "") + u.visible[i];
    if (u.visible.size() > 12) visible += ", ...";
    u.cfg.fail("inputs", fmt::format("of layer '{}' names '{}', which is no earlier layer (known here: {})", u.layer,
                                     u.name, visible));
  }

  void check_every_output_used() const {
    std::vector<int> readers(nodes_.size(), 0);
    for (const GraphNode& n : nodes_)
      for (int i : n.inputs)
        if (i != kNetInput) ++readers[static_cast<size_t>(i)];
    for (size_t i = 0; i + 1 < nodes_.size(); ++i)
      if (readers[i] == 0)
        nodes_[i].cfg.fail("", fmt::format("({} '{}'): its output is never used; every layer except the last must "
                                           "feed a later one (check the later layers' `inputs:`)",
                                           nodes_[i].type, nodes_[i].name));
  }

  std::vector<GraphNode> nodes_;
  std::set<std::string> all_names_, blocks_;
  std::optional<Unresolved> unresolved_;
};

}  // namespace

std::vector<GraphNode> expand_layer_graph(const std::vector<ConfigNode>& layers) { return Expander().run(layers); }

}  // namespace qtrain
