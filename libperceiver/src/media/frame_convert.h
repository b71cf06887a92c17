// Decoded video frame -> RGB24 with short-side resize and centre crop (libswscale).
// Output of one frame: uint8 [H, W, 3], row-major, no padding between rows.
#pragma once

#include <cstdint>
#include <vector>

#include "media/ffmpeg_ptr.h"

namespace perceiver {

/// How frames are resized. Area averages all covered source pixels (no aliasing when
/// shrinking); bilinear is slightly faster and what most training code uses.
enum class ResizeFilter { kArea, kBilinear };

namespace detail {

/// Converts frames to RGB24 at a fixed output geometry, caching the SwsContext for as long as
/// the source geometry, pixel format and colour description stay the same.
class FrameConverter {
 public:
  /// image_dim > 0: short side resized to image_dim, then the centre image_dim x image_dim crop.
  /// image_dim == 0: the source size, only converted to RGB.
  FrameConverter(int image_dim, ResizeFilter filter) : image_dim_(image_dim), filter_(filter) {}

  int image_dim() const { return image_dim_; }
  ResizeFilter filter() const { return filter_; }

  /// Output size for a source of w x h.
  int out_width(int src_w) const { return image_dim_ > 0 ? image_dim_ : src_w; }
  int out_height(int src_h) const { return image_dim_ > 0 ? image_dim_ : src_h; }

  /// Writes out_height x out_width x 3 bytes to dst.
  void convert(const AVFrame& src, uint8_t* dst);

 private:
  struct Key {
    int w = 0, h = 0, format = -1, colorspace = -1, range = -1;
    bool operator==(const Key&) const = default;
  };
  void prepare(const Key& key);
  void convert_cropped(const AVFrame& src, uint8_t* dst);
  void convert_then_crop(const AVFrame& src, uint8_t* dst);

  int image_dim_;
  ResizeFilter filter_;
  Key key_;
  bool crop_in_source_ = false;  // crop by plane pointer offsets before scaling (fast path)
  int crop_x_ = 0, crop_y_ = 0, crop_w_ = 0, crop_h_ = 0;  // source region that is scaled
  int scaled_w_ = 0, scaled_h_ = 0;                       // size swscale writes
  SwsPtr sws_;
  std::vector<uint8_t> scratch_;  // [scaled_h, scaled_w, 3] for the crop-after-scale path
};

}  // namespace detail
}  // namespace perceiver
