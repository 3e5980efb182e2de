// Build-time rewrite of CUDA launch syntax, so that the unchanged .cu sources compile as C++:
//   name<targs><<<cfg>>>(args)  ->  ::cuemu::launch("name<targs>", CUEMU_SITE, ::cuemu::LaunchConfig(cfg),
//                                    [&](auto&&... cuemu_a) { name<targs>(cuemu_a...); }, args)
// Everything else is copied as it is; comments and string literals are skipped; a #line directive
// and unchanged line breaks keep __FILE__/__LINE__ (and compiler messages) pointing at the original.
// Usage: cuemu_launch_rewrite INPUT OUTPUT DISPLAY_NAME
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>

namespace {

[[noreturn]] void die(const std::string& file, const std::string& src, size_t at, const std::string& what) {
  size_t line = 1;
  for (size_t i = 0; i < at && i < src.size(); ++i) line += src[i] == '\n';
  std::cerr << file << ":" << line << ": cuemu_launch_rewrite: " << what << "\n";
  std::exit(1);
}

// Skips a comment or a string/char literal starting at i; returns the index after it, or i.
size_t skip_literal(const std::string& s, size_t i) {
  if (s.compare(i, 2, "//") == 0) {
    const size_t e = s.find('\n', i);
    return e == std::string::npos ? s.size() : e;
  }
  if (s.compare(i, 2, "/*") == 0) {
    const size_t e = s.find("*/", i + 2);
    return e == std::string::npos ? s.size() : e + 2;
  }
  if (s[i] == '"' || s[i] == '\'') {
    // A digit separator (1'000) is not a char literal.
    if (s[i] == '\'' && i > 0 && std::isalnum(static_cast<unsigned char>(s[i - 1]))) return i;
    const char q = s[i];
    size_t j = i + 1;
    while (j < s.size() && s[j] != q) j += s[j] == '\\' ? 2 : 1;
    return j + 1;
  }
  return i;
}

bool is_ident(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::cerr << "usage: cuemu_launch_rewrite INPUT OUTPUT DISPLAY_NAME\n";
    return 2;
  }
  const std::string in = argv[1], display = argv[3];
  std::ifstream f(in, std::ios::binary);
  if (!f) {
    std::cerr << "cuemu_launch_rewrite: cannot read " << in << "\n";
    return 1;
  }
  std::stringstream buf;
  buf << f.rdbuf();
  const std::string src = buf.str();

  std::string out = "#line 1 \"" + display + "\"\n";
  size_t copied = 0;  // src[copied, i) is still to be copied
  size_t sites = 0;
  for (size_t i = 0; i < src.size();) {
    const size_t after = skip_literal(src, i);
    if (after != i) {
      i = after;
      continue;
    }
    if (src.compare(i, 3, "<<<") != 0) {
      ++i;
      continue;
    }
    // The kernel expression before <<<: an optional template argument list, then a qualified name.
    size_t start = i;
    while (start > 0 && std::isspace(static_cast<unsigned char>(src[start - 1]))) --start;
    // clang-format may put the <<< on the next line: the name ends before that whitespace.
    const size_t name_end = start;
    if (start > 0 && src[start - 1] == '>') {
      int depth = 0;
      do {
        --start;
        if (src[start] == '>')
          ++depth;
        else if (src[start] == '<')
          --depth;
      } while (depth > 0 && start > 0);
      if (depth != 0) die(display, src, i, "unbalanced template arguments before <<<");
    }
    while (start > 0 && (is_ident(src[start - 1]) || src[start - 1] == ':')) --start;
    const std::string kernel = src.substr(start, name_end - start);
    if (kernel.empty() ||
        !(std::isalpha(static_cast<unsigned char>(kernel[0])) || kernel[0] == '_' || kernel[0] == ':'))
      die(display, src, i, "no kernel name before <<<");
    const size_t close = src.find(">>>", i + 3);
    if (close == std::string::npos) die(display, src, i, "<<< without >>>");
    const std::string config = src.substr(i + 3, close - (i + 3));
    size_t paren = close + 3;
    // Line breaks between the name and <<< are kept (in `gap`), so that the lines after a launch keep
    // their numbers.
    std::string gap(static_cast<size_t>(std::count(src.begin() + static_cast<std::ptrdiff_t>(name_end),
                                                   src.begin() + static_cast<std::ptrdiff_t>(i), '\n')),
                    '\n');
    while (paren < src.size() && std::isspace(static_cast<unsigned char>(src[paren]))) gap += src[paren++];
    if (paren >= src.size() || src[paren] != '(')
      die(display, src, i, "a launch must be followed by its argument list");
    size_t first_arg = paren + 1;
    while (first_arg < src.size() && std::isspace(static_cast<unsigned char>(src[first_arg]))) ++first_arg;
    const bool no_args = first_arg < src.size() && src[first_arg] == ')';
    std::string name_literal;
    for (char c : kernel)
      if (c != '\n') name_literal += c == '"' ? '\'' : c;
    out.append(src, copied, start - copied);
    out += "::cuemu::launch(\"" + name_literal + "\", CUEMU_SITE, ::cuemu::LaunchConfig(" + config +
           "), [&](auto&&... cuemu_a) { " + kernel + "(cuemu_a...); }" + (no_args ? "" : ", ") + gap;
    copied = paren + 1;
    i = copied;
    ++sites;
  }
  out.append(src, copied, std::string::npos);
  // The output's folder may not exist: Ninja creates the folders of a rule's outputs, Make does not
  // (the rewritten tree mirrors the source tree under the build folder).
  const std::filesystem::path target = argv[2];
  std::error_code error;
  if (target.has_parent_path()) std::filesystem::create_directories(target.parent_path(), error);
  if (error) {
    std::cerr << "cuemu_launch_rewrite: cannot create " << target.parent_path().string() << ": " << error.message()
              << "\n";
    return 1;
  }
  std::ofstream o(target, std::ios::binary);
  o << out;
  if (!o) {
    std::cerr << "cuemu_launch_rewrite: cannot write " << argv[2] << "\n";
    return 1;
  }
  return 0;
}
