// ConfigNode: typed reads, ranges, choices, unknown keys with suggestions, located messages, --set.
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <functional>

#include "framework/core/config_node.h"
#include "tests/support/temp_dir.h"

using namespace qtrain;

namespace {
ConfigNode parse(const std::string& text, std::shared_ptr<ConfigSource> source = nullptr) {
  if (!source) {
    source = std::make_shared<ConfigSource>();
    source->file = "test.yaml";
  }
  return ConfigNode(YAML::Load(text), "", source);
}
}  // namespace

TEST_CASE("typed reads and defaults", "[config]") {
  ConfigNode n = parse("a: 3\nb: 0.5\nc: hello\nd: true\n");
  REQUIRE(n.get_int("a", 0, 0, 10) == 3);
  REQUIRE(n.get_double("b", 0, 0, 1) == 0.5);
  REQUIRE(n.get<std::string>("c", "") == "hello");
  REQUIRE(n.get<bool>("d", false));
  REQUIRE(n.get_int("missing", 7, 0, 10) == 7);
  n.finish();
}

TEST_CASE("errors name file, line and key path", "[config]") {
  ConfigNode root = parse("optimizer:\n  lr: -1\n");
  ConfigNode opt = root.child("optimizer");
  REQUIRE_THROWS_WITH(opt.get_double("lr", 0.1, 0, 1e9, true),
                      Catch::Contains("test.yaml:2:7") && Catch::Contains("optimizer.lr must be > 0, got -1"));
}

TEST_CASE("wrong types are reported with the expected type", "[config]") {
  ConfigNode n = parse("epochs: many\nlr: 1.5\n");
  REQUIRE_THROWS_WITH(n.get_int("epochs", 1, 1, 100), Catch::Contains("epochs must be an integer, got 'many'"));
  REQUIRE_THROWS_WITH(n.get_int("lr", 1, 1, 100), Catch::Contains("lr must be an integer, got '1.5'"));
}

TEST_CASE("integers are base 10 whatever their leading zeros, and out of range is an error, not a throw", "[config]") {
  // yaml-cpp alone reads 012 as octal 10 and throws its own exception on 028 (a fuzzing finding).
  ConfigNode n = parse("a: 012\nb: 028\nc: [1, 028, 012]\nd: 99999999999999999999\ne: [1, -99999999999999999999]\n");
  REQUIRE(n.get_int("a", 0, 0, 100) == 12);
  REQUIRE(n.get_int("b", 0, 0, 100) == 28);
  REQUIRE(n.get_int_list("c", {}, 0, 100) == std::vector<int64_t>{1, 28, 12});
  REQUIRE_THROWS_WITH(n.get_int("d", 0, 0, 100), Catch::Contains("test.yaml:4:4") &&
                                                     Catch::Contains("d must be an integer in [") &&
                                                     Catch::Contains("got 99999999999999999999"));
  REQUIRE_THROWS_WITH(n.get_int_list("e", {}, -100, 100), Catch::Contains("e entry 1 must be an integer in [") &&
                                                              Catch::Contains("got -99999999999999999999"));
  ConfigNode u = parse("n: -1\n");
  REQUIRE_THROWS_WITH(u.get<uint64_t>("n", 0), Catch::Contains("n must be an integer"));
}

TEST_CASE("unknown keys are rejected with a suggestion", "[config]") {
  ConfigNode n = parse("optimiser: {}\nname: x\n");
  n.get<std::string>("name", "");
  n.child("optimizer");
  REQUIRE_THROWS_WITH(n.finish(), Catch::Contains("test.yaml:1:1") && Catch::Contains("unknown key 'optimiser'") &&
                                      Catch::Contains("did you mean 'optimizer'"));
}

TEST_CASE("an unknown section made by --set is blamed on the --set, not on the file", "[config]") {
  auto source = std::make_shared<ConfigSource>();
  source->file = "x.yaml";
  source->positions = true;
  YAML::Node root = YAML::Load("train: {epochs: 2}\n");
  apply_override(root, *source, "trian.epochs=3");
  ConfigNode n(root, "", source);
  n.child("train");
  REQUIRE_THROWS_WITH(n.finish(), Catch::Contains("command line (--set trian.epochs): unknown key 'trian' (did you "
                                                  "mean 'train'?)"));
}

TEST_CASE("choices list the allowed values", "[config]") {
  ConfigNode n = parse("type: rmsprp\n");
  REQUIRE_THROWS_WITH(n.get_choice("type", "sgd", {"sgd", "rmsprop", "adam"}),
                      Catch::Contains("must be one of sgd, rmsprop, adam, got 'rmsprp'"));
}

TEST_CASE("--set overrides values and is named in errors", "[config]") {
  auto source = std::make_shared<ConfigSource>();
  source->file = "x.yaml";
  YAML::Node root = YAML::Load("train: {epochs: 2}\nmodel: {layers: [{type: dense, units: 4}]}\n");
  apply_override(root, *source, "train.epochs=-3");
  apply_override(root, *source, "model.layers.0.units=8");
  apply_override(root, *source, "data.path=/tmp/x");
  ConfigNode n(root, "", source);
  ConfigNode train = n.child("train");
  REQUIRE_THROWS_WITH(train.get_int("epochs", 1, 1, 1000),
                      Catch::Contains("command line (--set train.epochs)") && Catch::Contains("must be >= 1"));
  REQUIRE(n.child("data").get<std::string>("path", "") == "/tmp/x");
  REQUIRE(n.child("model").items("layers")[0].get_int("units", 0, 1, 100) == 8);
  REQUIRE_THROWS_WITH(apply_override(root, *source, "model.layers.5.units=1"), Catch::Contains("must index the list"));
  REQUIRE_THROWS_WITH(apply_override(root, *source, "novalue"), Catch::Contains("expected key.path=value"));
  // An index too long for std::stoul, and a key under a list entry that is a value, used to escape as
  // std::out_of_range and yaml-cpp's "operator[] call on a scalar".
  REQUIRE_THROWS_WITH(apply_override(root, *source, "model.layers.99999999999999999999.units=1"),
                      Catch::Contains("--set model.layers.99999999999999999999.units: '99999999999999999999' must "
                                      "index the list (0..0)"));
  REQUIRE_THROWS_WITH(apply_override(root, *source, "model.layers.99999999999999999999=1"),
                      Catch::Contains("must index the list"));
  apply_override(root, *source, "model.input=[1, 28, 28]");
  REQUIRE_THROWS_WITH(apply_override(root, *source, "model.input.0.x=1"),
                      Catch::Contains("--set model.input.0.x: '0' is a value, not a section"));
}

TEST_CASE("--set refuses to change one use of a YAML alias, which would change every use", "[config]") {
  auto source = std::make_shared<ConfigSource>();
  source->file = "x.yaml";
  YAML::Node root = YAML::Load(
      "optimizer: {lr: &rate 0.1, momentum: 0.9}\n"
      "other: {lr: *rate}\n"
      "model: {layers: [&wide {type: dense, units: 4}, {type: relu}, *wide]}\n");
  // A container reached through an alias: layers 0 and 2 are one node.
  REQUIRE_THROWS_WITH(apply_override(root, *source, "model.layers.2.units=8"),
                      Catch::Contains("--set model.layers.2.units: 'model.layers.2' is a YAML alias") &&
                          Catch::Contains("x.yaml:3:") && Catch::Contains("used in 2 places"));
  REQUIRE_THROWS_WITH(apply_override(root, *source, "model.layers.0.units=8"),
                      Catch::Contains("'model.layers.0' is a YAML alias"));
  // A shared scalar, and a new key inside a shared mapping.
  REQUIRE_THROWS_WITH(apply_override(root, *source, "other.lr=0.5"), Catch::Contains("'other.lr' is a YAML alias"));
  REQUIRE_THROWS_WITH(apply_override(root, *source, "model.layers.2.bias=false"),
                      Catch::Contains("'model.layers.2' is a YAML alias"));
  // Nothing changed, and overrides that touch no shared node still work.
  REQUIRE(root["model"]["layers"][0]["units"].as<int>() == 4);
  REQUIRE(root["optimizer"]["lr"].as<double>() == 0.1);
  REQUIRE_FALSE(root["model"]["layers"][0]["bias"].IsDefined());
  apply_override(root, *source, "optimizer.momentum=0.5");
  apply_override(root, *source, "model.layers.1.type=tanh");
  REQUIRE(root["optimizer"]["momentum"].as<double>() == 0.5);
  REQUIRE(root["model"]["layers"][1]["type"].as<std::string>() == "tanh");
}

TEST_CASE("missing file and YAML syntax errors", "[config]") {
  REQUIRE_THROWS_WITH(load_config_file("/nonexistent/x.yaml", {}), Catch::Contains("config file not found"));
}

TEST_CASE("duplicate keys and non-scalar keys and alias cycles are errors naming their line", "[config]") {
  testing::TempDir dir;
  // yaml-cpp keeps both entries of a duplicate key and every lookup finds the first: without this
  // check the second (here epochs: 2) would be ignored without a word.
  const std::string dup = dir.write("dup.yaml", "train: {epochs: 1}\nseed: 3\ntrain: {epochs: 2}\n");
  REQUIRE_THROWS_WITH(load_config_file(dup, {}), Catch::Contains(dup + ":3:1: duplicate key 'train'") &&
                                                     Catch::Contains("first given at " + dup + ":1:1"));
  const std::string nested = dir.write("nested.yaml", "optimizer:\n  lr: 0.1\n  lr: 0.2\n");
  REQUIRE_THROWS_WITH(load_config_file(nested, {}), Catch::Contains(nested + ":3:3: duplicate key 'lr'"));
  // A list as a key used to escape as yaml-cpp's "bad conversion" from finish().
  const std::string list_key = dir.write("listkey.yaml", "seed: 1\n[a, b]: 1\n");
  REQUIRE_THROWS_WITH(load_config_file(list_key, {}),
                      Catch::Contains(list_key + ":2:1: a key must be a plain name, got a list"));
  REQUIRE_THROWS_WITH(load_config_file(dir.write("ok.yaml", "seed: 1\n"), {"optimizer={[x]: 1}"}),
                      Catch::Contains("--set optimizer: a key must be a plain name, got a list"));
  // An anchor containing its own alias: --set walked it until the stack overflowed (a segfault).
  const std::string cycle = dir.write("cycle.yaml", "seed: 1\nx: &a [1, *a]\n");
  REQUIRE_THROWS_WITH(load_config_file(cycle, {"seed=2"}),
                      Catch::Contains(cycle + ":2:4: the node anchored here contains an alias of itself"));
  // Aliases of aliases are fine, also when shared: only a repeated key is an error.
  const std::string shared = dir.write("shared.yaml", "a: &x {k: 1}\nb: {p: *x, q: *x}\n");
  REQUIRE(load_config_file(shared, {"c=1"}).root["b"]["q"]["k"].as<int>() == 1);
}

TEST_CASE("an alias chain of exponential size does not hang --set", "[config]") {
  // Each level lists the previous one twice: 2^40 leaves behind 40 lines. --set counts the uses of
  // every node on its path; it used to walk every leaf and never finish.
  std::string text = "train: {epochs: 1}\nl0: &l0 [1, 2]\n";
  for (int i = 1; i <= 40; ++i) text += fmt::format("l{}: &l{} [*l{}, *l{}]\n", i, i, i - 1, i - 1);
  auto source = std::make_shared<ConfigSource>();
  source->file = "laughs.yaml";
  YAML::Node root = YAML::Load(text);
  apply_override(root, *source, "train.epochs=2");
  REQUIRE(root["train"]["epochs"].as<int>() == 2);
  REQUIRE_THROWS_WITH(apply_override(root, *source, "l40.0.0=5"), Catch::Contains("'l40.0' is a YAML alias"));
}

TEST_CASE("text that is not UTF-8 is an error naming its line, in the file and in --set", "[config]") {
  // yaml-cpp passes Latin-1 bytes through; they broke the JSON of the checkpoint's metadata after a
  // whole training run (and no checkpoint was written).
  testing::TempDir dir;
  const std::string value = dir.write("latin1.yaml", "seed: 1\nname: caf\xe9\n");
  REQUIRE_THROWS_WITH(load_config_file(value, {}), Catch::Contains(value + ":2:7: the text is not valid UTF-8"));
  const std::string key = dir.write("latin1key.yaml", "seed: 1\nn\xe4me: x\n");
  REQUIRE_THROWS_WITH(load_config_file(key, {}), Catch::Contains(key + ":2:1: the text is not valid UTF-8"));
  const std::string good = dir.write("utf8.yaml", "seed: 1\nname: caf\xc3\xa9\n");
  REQUIRE(load_config_file(good, {}).root["name"].as<std::string>() == "caf\xc3\xa9");
  REQUIRE_THROWS_WITH(load_config_file(good, {"name=\xed\xa0\x80"}),  // a UTF-16 surrogate, not UTF-8
                      Catch::Contains("--set name: the text is not valid UTF-8"));
}

TEST_CASE("a NUL in a value is an error naming its line; control characters in a path are shown escaped", "[config]") {
  // A NUL reached open() as the end of the path: data.path "data\0x" opened "data", and messages were
  // cut at it.
  testing::TempDir dir;
  const std::string file = dir.write("nul.yaml", "seed: 1\ndata: {path: \"a\\0b\"}\n");
  REQUIRE_THROWS_WITH(load_config_file(file, {}), Catch::Contains(file + ":2:14: the text holds a NUL character"));
  const std::string good = dir.write("good.yaml", "seed: 1\n");
  REQUIRE_THROWS_WITH(load_config_file(good, {"data.path=\"x\\0y\""}),
                      Catch::Contains("--set data.path: the text holds a NUL character"));
  REQUIRE_THROWS_WITH(load_config_file("a\x01"
                                       "b.yaml",
                                       {}),
                      Catch::Equals("a\\x01b.yaml: config file not found"));
}

TEST_CASE("a file of several YAML documents is an error (reading only the first would drop the rest silently)",
          "[config]") {
  testing::TempDir dir;
  const std::string two = dir.write("two.yaml", "seed: 1\n---\nseed: 2\n");
  REQUIRE_THROWS_WITH(load_config_file(two, {}),
                      Catch::Contains(two + ":2:1: a second YAML document begins here; a config is one document"));
  // A document after an end marker `...` counts too.
  const std::string ended = dir.write("ended.yaml", "seed: 1\n...\nseed: 2\n");
  REQUIRE_THROWS_WITH(load_config_file(ended, {}), Catch::Contains(ended + ":3:1: a second YAML document"));
  const std::string one = dir.write("one.yaml", "---\nseed: 1\n");  // one document with its marker is fine
  REQUIRE(load_config_file(one, {}).root["seed"].as<int>() == 1);
}

namespace {
// Runs `load` in a forked child with at most 1 GiB more address space than this process has now
// (RLIMIT_AS) and 5 seconds (alarm), and tells how it ended: "error: <message>" for an InputError,
// "exception: <what>" for another exception (std::bad_alloc when the memory ran out), "no error" when
// it returned, or the signal that ended it (SIGALRM: out of time). A loader that loops for ever fails
// the test this way instead of filling the machine's memory (issue 24).
std::string outcome_in_child(const std::function<void()>& load) {
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::close(fds[0]);
    std::string out;
    try {
      long pages = 0;
      std::ifstream("/proc/self/statm") >> pages;
      const rlim_t limit = static_cast<rlim_t>(pages) * ::sysconf(_SC_PAGESIZE) + (rlim_t{1} << 30);
      const rlimit rl{limit, limit};
      if (::setrlimit(RLIMIT_AS, &rl) != 0) throw std::runtime_error("setrlimit failed");
      ::alarm(5);
      load();
      out = "no error";
    } catch (const InputError& e) {
      out = std::string("error: ") + e.what();
    } catch (const std::exception& e) {
      out = std::string("exception: ") + e.what();
    }
    for (size_t at = 0; at < out.size();) {
      const ssize_t n = ::write(fds[1], out.data() + at, out.size() - at);
      if (n <= 0) break;
      at += static_cast<size_t>(n);
    }
    ::_exit(0);
  }
  ::close(fds[1]);
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;) out.append(buf, static_cast<size_t>(n));
  ::close(fds[0]);
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  if (WIFSIGNALED(status))
    return fmt::format("killed by signal {} ({})", WTERMSIG(status),
                       WTERMSIG(status) == SIGALRM ? "over the 5 s limit" : ::strsignal(WTERMSIG(status)));
  return out;
}
}  // namespace

TEST_CASE("malformed configs end in a located error, within a memory and a time limit", "[config]") {
  // yaml-cpp 0.7.0's LoadAll never ends on a ',' where a value should begin: it returns a null document
  // without consuming the comma and is asked for the next one, for ever, filling the memory (issue 24,
  // yaml-cpp #1040). The other inputs are known to hang or crash some YAML parsers.
  testing::TempDir dir;
  const std::string deep(5000, '[');
  std::string numbers = "[";
  for (int i = 0; i < 200000; ++i) numbers += std::to_string(i) + ",";
  numbers.back() = ']';
  const std::pair<std::string, std::string> cases[] = {
      {",", ":1:1: YAML syntax error: unexpected ','"},
      {", \xc3\xbf", ":1:1: YAML syntax error: unexpected ','"},
      {",,,", ":1:1: YAML syntax error: unexpected ','"},
      {"[1],", ":1:4: YAML syntax error: unexpected ','"},
      {"{a: b},", ":1:7: YAML syntax error: unexpected ','"},
      {"!x ,", ":1:4: YAML syntax error: unexpected ','"},
      {"&a ,", ":1:4: YAML syntax error: unexpected ','"},
      {"'a' ,", ":1:5: YAML syntax error: unexpected ','"},
      {"--- ,", ":1:5: YAML syntax error: unexpected ','"},
      {"%YAML 1.2\n---\n,", ":3:1: YAML syntax error: unexpected ','"},
      {"# comment\n,", ":2:1: YAML syntax error: unexpected ','"},
      {"seed: 1\n,\n", ":2:1: YAML syntax error: end of map not found"},  // a stray comma ending a mapping
      {"- a\n,", ":2:1: YAML syntax error: unexpected ','"},
      {"seed: 1\n...\n,\n", ":3:1: YAML syntax error: unexpected ','"},
      {"- ,", ":1:3: YAML syntax error: end of sequence not found"},
      {"? ,", ":1:3: YAML syntax error: end of map not found"},
      {"[:", ":1:2: YAML syntax error: unknown token"},
      {"{:", ":1:2: YAML syntax error: unknown token"},
      {"- !+(.,.)", ":1:7: YAML syntax error: end of sequence not found"},
      {std::string(101, '[') + std::string(101, ']'),
       ":1:101: YAML syntax error: lists and mappings are nested more than 100 levels deep"},
      // Unclosed, yaml-cpp reads every inner '[' as the key of a mapping: the 101st level is at column 51.
      {deep, ":1:51: YAML syntax error: lists and mappings are nested more than 100 levels deep"},
      {numbers, ": a config must be a YAML mapping of sections"},
  };
  for (const auto& [text, expected] : cases) {
    const std::string file = dir.write("bad.yaml", text);
    INFO("config: " << text.substr(0, 40));
    CHECK_THAT(outcome_in_child([&] { load_config_file(file, {}); }), Catch::Contains("error: " + file + expected));
  }
  // The same loader reads --set values (yaml-cpp's Load took the value ',' for null without a word).
  const std::string ok = dir.write("ok.yaml", "seed: 1\n");
  REQUIRE_THAT(
      outcome_in_child([&] { load_config_file(ok, {"seed=,"}); }),
      Catch::Contains("error: --set seed: the value ',' is not valid YAML") && Catch::Contains("unexpected ','"));
  REQUIRE_THAT(outcome_in_child([&] { load_config_file(ok, {"seed=" + deep}); }),
               Catch::Contains("nested more than 100 levels deep"));
}
