// The kernel resource check (issue 17): would every kernel launch the emulated tests make be accepted
// by a real GPU of each architecture the build compiles for? The emulator records what each launch
// asks (CUEMU_LAUNCH_LOG: site, kernel, threads per block); ptxas reports what each kernel needs
// (nvcc --resource-usage, kept by ptxas_capture.sh: registers per thread, static shared memory, for
// every sm_XX). A launch fails on the GPU (cudaErrorLaunchOutOfResources) when the block's registers
// exceed the per-block register file, and a kernel cannot be loaded with more than 48 KiB of static
// shared memory; the emulator knows neither.
//
// Registers per block are counted as the toolkit's occupancy calculator counts them for its hardware
// check (cuda_occupancy.h, cudaOccMaxBlocksPerSMRegsLimit): registers per thread x 32 rounded up to
// the allocation granularity of 256 per warp, times the warps of the block rounded up to the 4
// sub-partitions of an SM; at most 65536 per block and 255 per thread on compute capability 8.x and
// 9.x (CUDA C++ Programming Guide, technical specifications per compute capability).
//
// Kernels are matched by their unqualified name (a template's worst instantiation counts), within the
// object compiled from the launching .cu when there is one, else (a launch in a header) in every
// object. A launched kernel ptxas did not report, or reported for only some architectures, is an
// error too: the check must not pass by finding nothing.
//
// Usage: cuemu_resource_check --log LAUNCH_LOG --objects LIST [--root DIR] --arch sm_80 [--arch ...]
//        [--all]
//   LIST: a file naming one object per line; OBJ.ptxas is read for each. --root: the source tree,
//   to name sources as the launch log does (quant/onebit.cu). --all: also list the kernels no
//   emulated test launched. Exit status 0: every launch fits; 1: a launch does not fit, or a
//   launched kernel is missing; 2: bad input.
#include <cxxabi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace {

constexpr long kRegsPerBlock = 65536;
constexpr long kRegsPerThread = 255;
constexpr long kRegAllocationUnit = 256;  // registers, allocated per warp
constexpr long kSubPartitions = 4;
constexpr long kStaticSharedPerBlock = 48 * 1024;

[[noreturn]] void bad_input(const std::string& what) {
  std::cerr << "cuemu_resource_check: " << what << "\n";
  std::exit(2);
}

struct Kernel {
  std::string source;  // as the launch log names it: quant/onebit.cu
  std::string arch;    // sm_80
  std::string mangled;
  std::string name;  // unqualified: pack_kernel
  long registers = -1;
  long shared = 0;  // static __shared__ bytes
  long spill_stores = 0, stack = 0;
};

struct Launch {
  std::string file;  // quant/onebit.cu
  int line = 0;
  std::string kernel;  // as written at the launch: decode_kernel<true>
  std::string name;    // unqualified
  long threads = 0;
};

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  const size_t e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

// The unqualified function name of a demangled kernel signature:
// "void ns::(anonymous namespace)::k<A, B<int> >(A, long)" -> "k".
std::string function_name(const std::string& demangled) {
  std::string s = trim(demangled);
  if (!s.empty() && s.back() == ')') {  // drop the parameter list
    int depth = 0;
    size_t i = s.size();
    while (i > 0) {
      const char c = s[--i];
      if (c == ')')
        ++depth;
      else if (c == '(' && --depth == 0)
        break;
    }
    s = trim(s.substr(0, i));
  }
  if (!s.empty() && s.back() == '>') {  // drop the template arguments
    int depth = 0;
    size_t i = s.size();
    while (i > 0) {
      const char c = s[--i];
      if (c == '>')
        ++depth;
      else if (c == '<' && --depth == 0)
        break;
    }
    s = trim(s.substr(0, i));
  }
  size_t b = s.size();
  while (b > 0 && (std::isalnum(static_cast<unsigned char>(s[b - 1])) || s[b - 1] == '_')) --b;
  return s.substr(b);
}

// The unqualified name of a kernel as written at a launch: "detail::decode_kernel<true>" -> "decode_kernel".
std::string launch_name(const std::string& kernel) {
  std::string s = kernel.substr(0, kernel.find('<'));
  const size_t colon = s.rfind("::");
  if (colon != std::string::npos) s = s.substr(colon + 2);
  return trim(s);
}

std::string demangle(const std::string& mangled) {
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> d(abi::__cxa_demangle(mangled.c_str(), nullptr, nullptr, &status), std::free);
  if (status != 0 || !d) return mangled;  // an extern "C" kernel is not mangled
  return d.get();
}

std::string relative_to(const std::string& path, const std::string& root) {
  if (!root.empty() && path.size() > root.size() && path.compare(0, root.size(), root) == 0 && path[root.size()] == '/')
    return path.substr(root.size() + 1);
  return path;
}

// Reads one ptxas report kept by ptxas_capture.sh.
void read_report(const std::string& file, const std::string& root, std::vector<Kernel>& out) {
  std::ifstream in(file);
  if (!in) bad_input("cannot read " + file + " (is the object built? ptxas_capture.sh writes it beside the object)");
  std::string line, source;
  if (!std::getline(in, line) || line.compare(0, 7, "source ") != 0) bad_input(file + ": no 'source' line first");
  source = relative_to(line.substr(7), root);
  static const std::regex entry(R"(Compiling entry function '([^']+)' for '(sm_[0-9a-z]+)')");
  static const std::regex used(R"(Used ([0-9]+) registers)");
  static const std::regex smem(R"(([0-9]+) bytes smem)");
  static const std::regex frame(R"(([0-9]+) bytes stack frame, ([0-9]+) bytes spill stores)");
  Kernel* current = nullptr;
  std::smatch m;
  while (std::getline(in, line)) {
    if (std::regex_search(line, m, entry)) {
      Kernel k;
      k.source = source;
      k.mangled = m[1];
      k.arch = m[2];
      k.name = function_name(demangle(k.mangled));
      out.push_back(k);
      current = &out.back();
    } else if (current && std::regex_search(line, m, frame)) {
      current->stack = std::stol(m[1]);
      current->spill_stores = std::stol(m[2]);
    } else if (current && std::regex_search(line, m, used)) {
      current->registers = std::stol(m[1]);
      if (std::regex_search(line, m, smem)) current->shared = std::stol(m[1]);
      current = nullptr;
    }
  }
  for (const Kernel& k : out)
    if (k.registers < 0) bad_input(file + ": no register count for " + k.mangled);
}

std::vector<Launch> read_log(const std::string& file) {
  std::ifstream in(file);
  if (!in) bad_input("no launch log " + file + ": the emulated tests that write it (CUEMU_LAUNCH_LOG) did not run");
  std::vector<Launch> out;
  std::string line;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    line = trim(line);
    if (line.empty()) continue;
    // "quant/onebit.cu:92 decode_kernel<true> 256": the kernel may hold spaces.
    const size_t first = line.find(' '), last = line.rfind(' ');
    const size_t colon = line.rfind(':', first);
    if (first == std::string::npos || first == last || colon == std::string::npos)
      bad_input(file + ":" + std::to_string(number) + ": not 'FILE:LINE KERNEL THREADS': " + line);
    Launch l;
    l.file = line.substr(0, colon);
    l.line = std::atoi(line.substr(colon + 1, first - colon - 1).c_str());
    l.kernel = trim(line.substr(first + 1, last - first - 1));
    l.name = launch_name(l.kernel);
    l.threads = std::atol(line.substr(last + 1).c_str());
    if (l.line <= 0 || l.threads <= 0 || l.name.empty())
      bad_input(file + ":" + std::to_string(number) + ": not 'FILE:LINE KERNEL THREADS': " + line);
    out.push_back(l);
  }
  if (out.empty()) bad_input("the launch log " + file + " is empty: no emulated test launched a kernel");
  return out;
}

long round_up(long v, long unit) { return (v + unit - 1) / unit * unit; }

// The registers a block of `threads` threads holds, as the launch is checked (see the top).
long registers_per_block(long registers, long threads) {
  const long per_warp = round_up(registers * 32, kRegAllocationUnit);
  return per_warp * round_up((threads + 31) / 32, kSubPartitions);
}

std::string percent(long v, long limit) {
  char b[16];
  std::snprintf(b, sizeof b, "%ld%%", (v * 100 + limit - 1) / limit);
  return b;
}

}  // namespace

int main(int argc, char** argv) {
  std::string log, objects, root;
  std::vector<std::string> archs;
  bool all = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) bad_input(a + " needs a value");
      return argv[++i];
    };
    if (a == "--log")
      log = value();
    else if (a == "--objects")
      objects = value();
    else if (a == "--root")
      root = value();
    else if (a == "--arch")
      archs.push_back(value());
    else if (a == "--all")
      all = true;
    else
      bad_input("unknown argument " + a +
                " (usage: cuemu_resource_check --log FILE --objects LIST [--root DIR] --arch sm_XX... [--all])");
  }
  if (log.empty() || objects.empty() || archs.empty()) bad_input("--log, --objects and --arch are required");
  while (!root.empty() && root.back() == '/') root.pop_back();

  std::vector<Kernel> kernels;
  {
    std::ifstream list(objects);
    if (!list) bad_input("cannot read " + objects);
    std::string obj;
    while (std::getline(list, obj)) {
      obj = trim(obj);
      if (!obj.empty()) read_report(obj + ".ptxas", root, kernels);
    }
  }
  if (kernels.empty()) bad_input("no kernel in the ptxas reports of " + objects);
  const std::vector<Launch> launches = read_log(log);

  // The launches by site and kernel, with the largest block seen there.
  std::map<std::pair<std::string, std::string>, long> sites;  // ("quant/onebit.cu:92", kernel) -> threads
  for (const Launch& l : launches) {
    long& t = sites[{l.file + ":" + std::to_string(l.line), l.kernel}];
    t = std::max(t, l.threads);
  }

  std::cout << "Kernel resources against the launches of the emulated tests (" << launches.size() << " log lines, "
            << sites.size() << " launch sites; " << kernels.size() << " kernel builds in the ptxas reports).\n"
            << "Registers per block: ptxas's registers per thread x 32, rounded up to " << kRegAllocationUnit
            << " per warp, x warps rounded up to " << kSubPartitions << " (cuda_occupancy.h); limit " << kRegsPerBlock
            << ". Static shared memory limit " << kStaticSharedPerBlock
            << " bytes. A template counts with its worst instantiation.\n\n";
  std::printf("%-34s %-30s %7s %-6s %5s %13s %12s %s\n", "launch site", "kernel", "threads", "arch", "regs",
              "regs/block", "static smem", "");
  int failures = 0;
  std::set<const Kernel*> launched;
  struct Worst {
    double share = -1;
    std::string what;
  } worst;
  for (const auto& [key, threads] : sites) {
    const auto& [site, kernel] = key;
    const std::string file = site.substr(0, site.rfind(':'));
    const std::string name = launch_name(kernel);
    std::vector<const Kernel*> candidates;
    for (const Kernel& k : kernels)
      if (k.name == name && k.source == file) candidates.push_back(&k);
    if (candidates.empty())  // a launch in a header, or of a kernel another translation unit defines
      for (const Kernel& k : kernels)
        if (k.name == name) candidates.push_back(&k);
    if (candidates.empty()) {
      std::printf("%-34s %-30s %7ld  FAIL: no kernel named %s in the ptxas reports\n", site.c_str(), kernel.c_str(),
                  threads, name.c_str());
      ++failures;
      continue;
    }
    for (const std::string& arch : archs) {
      const Kernel* regs = nullptr;
      const Kernel* shared = nullptr;
      for (const Kernel* k : candidates) {
        if (k->arch != arch) continue;
        launched.insert(k);
        if (!regs || k->registers > regs->registers) regs = k;
        if (!shared || k->shared > shared->shared) shared = k;
      }
      if (!regs) {
        std::printf("%-34s %-30s %7ld %-6s  FAIL: ptxas reported no %s code for %s\n", site.c_str(), kernel.c_str(),
                    threads, arch.c_str(), arch.c_str(), name.c_str());
        ++failures;
        continue;
      }
      const long block = registers_per_block(regs->registers, threads);
      std::string verdict;
      if (regs->registers > kRegsPerThread) verdict += " FAIL: more than 255 registers per thread;";
      if (block > kRegsPerBlock)
        verdict += " FAIL: " + std::to_string(block) + " registers per block > " + std::to_string(kRegsPerBlock) + ";";
      if (shared->shared > kStaticSharedPerBlock)
        verdict += " FAIL: " + std::to_string(shared->shared) + " bytes of static shared memory > " +
                   std::to_string(kStaticSharedPerBlock) + ";";
      if (!verdict.empty()) ++failures;
      if (regs->spill_stores > 0) verdict += " (spills " + std::to_string(regs->spill_stores) + " bytes)";
      std::printf("%-34s %-30s %7ld %-6s %5ld %6ld (%4s) %5ld (%4s)%s\n", site.c_str(), kernel.c_str(), threads,
                  arch.c_str(), regs->registers, block, percent(block, kRegsPerBlock).c_str(), shared->shared,
                  percent(shared->shared, kStaticSharedPerBlock).c_str(), verdict.c_str());
      const double share = std::max(double(block) / kRegsPerBlock, double(shared->shared) / kStaticSharedPerBlock);
      if (share > worst.share) {
        worst.share = share;
        std::ostringstream w;
        w << kernel << " at " << site << " on " << arch << ": " << threads << " threads x " << regs->registers
          << " registers = " << block << " of " << kRegsPerBlock << " per block, " << shared->shared << " of "
          << kStaticSharedPerBlock << " bytes of static shared memory";
        worst.what = w.str();
      }
    }
  }

  std::vector<const Kernel*> unlaunched;
  for (const Kernel& k : kernels)
    if (!launched.count(&k) && std::find(archs.begin(), archs.end(), k.arch) != archs.end()) unlaunched.push_back(&k);
  std::set<std::string> unlaunched_names;
  for (const Kernel* k : unlaunched) unlaunched_names.insert(k->source + " " + k->name);
  std::cout << "\nClosest to a limit: " << worst.what << ".\n";
  std::cout << unlaunched_names.size() << " kernels (by source and name) were not launched by the emulated tests, so "
            << "their launches are not checked" << (all ? ":" : " (--all lists them).") << "\n";
  if (all) {
    for (const Kernel* k : unlaunched)
      std::printf("  %-28s %-30s %-6s %5ld registers %6ld bytes static smem\n", k->source.c_str(), k->name.c_str(),
                  k->arch.c_str(), k->registers, k->shared);
  }
  if (failures) {
    std::cout << "\nFAILED: " << failures << " launch(es) would not run on a GPU, or could not be checked.\n";
    return 1;
  }
  std::cout << "\nOK: every launch fits on ";
  for (size_t i = 0; i < archs.size(); ++i) std::cout << (i ? ", " : "") << archs[i];
  std::cout << ".\n";
  return 0;
}
