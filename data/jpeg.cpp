// libjpeg-turbo decoding with libjpeg's errors turned into exceptions. libjpeg reports errors through
// error_exit, which must not return; it longjmps back here. The functions that call setjmp hold only
// C objects, so no C++ destructor is skipped, and the exception is thrown once back in C++ frames.
#include "data/jpeg.h"

// clang-format off
#include <cstdio>  // jpeglib.h needs FILE and size_t declared first
#include <csetjmp>
#include <jpeglib.h>
#include <jerror.h>
// clang-format on

#include <fstream>

#include "framework/core/check.h"

namespace qtrain {
namespace {

struct ErrorManager {
  jpeg_error_mgr mgr;  // first member: libjpeg sees a jpeg_error_mgr*
  jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

[[noreturn]] void on_error(j_common_ptr cinfo) {
  auto* err = reinterpret_cast<ErrorManager*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, err->message);
  std::longjmp(err->jump, 1);
}

// Warnings (level -1) report corrupt data that libjpeg would paper over (a truncated file decodes
// with its missing part grey). They are errors here, except extraneous bytes between markers, which
// are harmless and occur in real data sets (ImageNet among them). Trace messages are dropped.
void on_message(j_common_ptr cinfo, int level) {
  if (level < 0 && cinfo->err->msg_code != JWRN_EXTRANEOUS_DATA) on_error(cinfo);
}

// Allocates the decompressor's state. Returns false on a libjpeg error (message in err).
bool create(jpeg_decompress_struct* cinfo, ErrorManager* err) {
  if (setjmp(err->jump)) return false;
  jpeg_create_decompress(cinfo);
  return true;
}

// Header and output colour space. Returns false on a libjpeg error (message in err).
bool read_header(jpeg_decompress_struct* cinfo, ErrorManager* err, const uint8_t* data, size_t size) {
  if (setjmp(err->jump)) return false;
  jpeg_mem_src(cinfo, data, static_cast<unsigned long>(size));
  jpeg_read_header(cinfo, TRUE);
  // CMYK and YCCK decode to CMYK (libjpeg converts no further); everything else straight to RGB.
  cinfo->out_color_space =
      cinfo->jpeg_color_space == JCS_CMYK || cinfo->jpeg_color_space == JCS_YCCK ? JCS_CMYK : JCS_RGB;
  return true;
}

// Starts decompression (a progressive image allocates its whole coefficient buffer here). Returns
// false on a libjpeg error (message in err).
bool start(jpeg_decompress_struct* cinfo, ErrorManager* err) {
  if (setjmp(err->jump)) return false;
  jpeg_start_decompress(cinfo);
  return true;
}

// Every scanline into `out` (output_height rows of output_width * output_components bytes).
bool finish(jpeg_decompress_struct* cinfo, ErrorManager* err, uint8_t* out) {
  if (setjmp(err->jump)) return false;
  const size_t stride = static_cast<size_t>(cinfo->output_width) * static_cast<size_t>(cinfo->output_components);
  while (cinfo->output_scanline < cinfo->output_height) {
    JSAMPROW row = out + static_cast<size_t>(cinfo->output_scanline) * stride;
    jpeg_read_scanlines(cinfo, &row, 1);
  }
  jpeg_finish_decompress(cinfo);
  return true;
}

// Destroys the decompressor when leaving decode_jpeg, on success and on error alike (destroying one
// that was never created is a no-op: its memory manager is still null).
struct Decompressor {
  jpeg_decompress_struct cinfo{};
  ErrorManager err{};
  Decompressor() {
    cinfo.err = jpeg_std_error(&err.mgr);
    err.mgr.error_exit = on_error;
    err.mgr.emit_message = on_message;
  }
  ~Decompressor() { jpeg_destroy_decompress(&cinfo); }
};

}  // namespace

RgbImage decode_jpeg(const uint8_t* data, size_t size, const std::string& path) {
  if (size < 2 || data[0] != 0xFF || data[1] != 0xD8)
    input_error("{}: not a JPEG file (it does not start with the JPEG marker FF D8; {} bytes)", path, size);
  Decompressor d;
  if (!create(&d.cinfo, &d.err)) input_error("{}: cannot set up the JPEG decoder: {}", path, d.err.message);
  if (!read_header(&d.cinfo, &d.err, data, size)) input_error("{}: cannot decode JPEG: {}", path, d.err.message);
  // The header alone declares the size (up to 65500 x 65500): a few hundred bytes could otherwise make
  // every loader thread allocate and clear gigabytes before the missing data is noticed.
  const uint64_t declared = static_cast<uint64_t>(d.cinfo.image_width) * d.cinfo.image_height;
  if (declared > kMaxJpegPixels)
    input_error(
        "{}: the JPEG header declares {}x{} pixels, more than the {} an image may have (PIL's "
        "decompression-bomb limit); the file is damaged or not a photograph",
        path, d.cinfo.image_width, d.cinfo.image_height, kMaxJpegPixels);
  if (!start(&d.cinfo, &d.err)) input_error("{}: cannot decode JPEG: {}", path, d.err.message);
  const int components = d.cinfo.output_components;
  RgbImage image;
  image.height = d.cinfo.output_height;
  image.width = d.cinfo.output_width;
  const size_t pixels = static_cast<size_t>(image.height) * static_cast<size_t>(image.width);
  if (components == 3) {
    image.pixels.resize(pixels * 3);
    if (!finish(&d.cinfo, &d.err, image.pixels.data())) input_error("{}: cannot decode JPEG: {}", path, d.err.message);
    return image;
  }
  QT_CHECK(components == 4, "{}: libjpeg produced {} components, expected 3 or 4", path, components);
  std::vector<uint8_t> cmyk(pixels * 4);
  if (!finish(&d.cinfo, &d.err, cmyk.data())) input_error("{}: cannot decode JPEG: {}", path, d.err.message);
  // Adobe applications write CMYK inverted (0 = full ink); without their marker the values are plain.
  const bool inverted = d.cinfo.saw_Adobe_marker;
  image.pixels.resize(pixels * 3);
  for (size_t i = 0; i < pixels; ++i) {
    const uint8_t* p = &cmyk[i * 4];
    const int k = inverted ? p[3] : 255 - p[3];
    for (int c = 0; c < 3; ++c) {
      const int v = inverted ? p[c] : 255 - p[c];
      image.pixels[i * 3 + static_cast<size_t>(c)] = static_cast<uint8_t>((v * k + 127) / 255);
    }
  }
  return image;
}

RgbImage read_jpeg(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) input_error("{}: cannot open the file", path);
  const std::streamsize size = in.tellg();
  in.seekg(0);
  std::vector<uint8_t> bytes(static_cast<size_t>(size));
  if (!in.read(reinterpret_cast<char*>(bytes.data()), size)) input_error("{}: cannot read the file", path);
  return decode_jpeg(bytes.data(), bytes.size(), path);
}

}  // namespace qtrain
