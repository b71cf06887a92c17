// Short-side resize + centre crop with libswscale.
//
// The crop is a square of the source's short side, centred: resizing the short side to D and
// cropping D x D is the same as cropping that square first and resizing it to D x D, and the
// latter scales (D x D) instead of (D·long/short x D) output pixels. The crop is done by offsetting
// the plane pointers, aligned to the chroma subsampling so chroma stays in step (the square may
// sit up to one pixel left of/above the exact centre). Formats where pointers cannot be offset
// per pixel (bitstream, palette, packed subsampled like YUYV) are scaled whole, then cropped.
#include "media/frame_convert.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "perceiver/error.h"

extern "C" {
#include <libavutil/pixdesc.h>
}

namespace perceiver::detail {
namespace {

bool can_offset_planes(const AVPixFmtDescriptor* d) {
  if (d->flags & (AV_PIX_FMT_FLAG_BITSTREAM | AV_PIX_FMT_FLAG_PAL | AV_PIX_FMT_FLAG_HWACCEL))
    return false;
  const bool subsampled = d->log2_chroma_w != 0 || d->log2_chroma_h != 0;
  return (d->flags & AV_PIX_FMT_FLAG_PLANAR) || !subsampled;
}

bool is_yuv(const AVPixFmtDescriptor* d) {
  return !(d->flags & AV_PIX_FMT_FLAG_RGB) && d->nb_components >= 3;
}

// Maps the deprecated full-range yuvj formats to their plain twins; the range is passed to
// swscale explicitly instead (avoids its "deprecated pixel format" warning on every context).
AVPixelFormat plain_format(AVPixelFormat f, bool& full_range) {
  switch (f) {
    case AV_PIX_FMT_YUVJ420P: full_range = true; return AV_PIX_FMT_YUV420P;
    case AV_PIX_FMT_YUVJ422P: full_range = true; return AV_PIX_FMT_YUV422P;
    case AV_PIX_FMT_YUVJ444P: full_range = true; return AV_PIX_FMT_YUV444P;
    case AV_PIX_FMT_YUVJ440P: full_range = true; return AV_PIX_FMT_YUV440P;
    case AV_PIX_FMT_YUVJ411P: full_range = true; return AV_PIX_FMT_YUV411P;
    default: return f;
  }
}

}  // namespace

void FrameConverter::prepare(const Key& key) {
  key_ = key;
  const auto* desc = av_pix_fmt_desc_get(AVPixelFormat(key.format));
  PCV_CHECK(desc, "decoder produced an unknown pixel format ", key.format);
  crop_in_source_ = image_dim_ > 0 && can_offset_planes(desc);
  const int short_side = std::min(key.w, key.h);
  if (image_dim_ == 0) {
    crop_x_ = crop_y_ = 0, crop_w_ = key.w, crop_h_ = key.h;
    scaled_w_ = key.w, scaled_h_ = key.h;
  } else if (crop_in_source_) {
    const int ax = (1 << desc->log2_chroma_w) - 1, ay = (1 << desc->log2_chroma_h) - 1;
    crop_x_ = ((key.w - short_side) / 2) & ~ax;
    crop_y_ = ((key.h - short_side) / 2) & ~ay;
    crop_w_ = crop_h_ = short_side;
    scaled_w_ = scaled_h_ = image_dim_;
  } else {
    crop_x_ = crop_y_ = 0, crop_w_ = key.w, crop_h_ = key.h;
    scaled_w_ = std::max<int>(image_dim_, std::lround(double(key.w) * image_dim_ / short_side));
    scaled_h_ = std::max<int>(image_dim_, std::lround(double(key.h) * image_dim_ / short_side));
    scratch_.resize(size_t(scaled_w_) * scaled_h_ * 3);
  }
  bool full_range = key.range == AVCOL_RANGE_JPEG;
  const AVPixelFormat fmt = plain_format(AVPixelFormat(key.format), full_range);
  const int flags = filter_ == ResizeFilter::kArea ? SWS_AREA : SWS_BILINEAR;
  sws_.reset(sws_getContext(crop_w_, crop_h_, fmt, scaled_w_, scaled_h_, AV_PIX_FMT_RGB24, flags,
                            nullptr, nullptr, nullptr));
  PCV_CHECK(sws_, "sws_getContext: cannot convert ", av_get_pix_fmt_name(fmt), " ", crop_w_, "x",
            crop_h_, " to rgb24 ", scaled_w_, "x", scaled_h_);
  if (is_yuv(desc)) {
    // Matrix (BT.601/709/...) and range from the frame, so colours come out right; unspecified
    // colour spaces get swscale's default (BT.601), as in ffmpeg's scale filter.
    const int* coeffs = sws_getCoefficients(key.colorspace);
    sws_setColorspaceDetails(sws_.get(), coeffs, full_range ? 1 : 0,
                             sws_getCoefficients(SWS_CS_DEFAULT), 1, 0, 1 << 16, 1 << 16);
  }
}

void FrameConverter::convert(const AVFrame& src, uint8_t* dst) {
  const Key key{src.width, src.height, src.format, int(src.colorspace), int(src.color_range)};
  if (!sws_ || !(key == key_)) prepare(key);
  if (image_dim_ > 0 && !crop_in_source_)
    convert_then_crop(src, dst);
  else
    convert_cropped(src, dst);
}

void FrameConverter::convert_cropped(const AVFrame& src, uint8_t* dst) {
  const auto* desc = av_pix_fmt_desc_get(AVPixelFormat(src.format));
  const uint8_t* planes[4] = {};
  int plane_step[4] = {};
  int plane_shift_x[4] = {}, plane_shift_y[4] = {};
  for (int c = 0; c < desc->nb_components; ++c) {
    const auto& comp = desc->comp[c];
    const bool chroma = (c == 1 || c == 2) && is_yuv(desc);
    plane_step[comp.plane] = std::max(plane_step[comp.plane], comp.step);
    plane_shift_x[comp.plane] = chroma ? desc->log2_chroma_w : 0;
    plane_shift_y[comp.plane] = chroma ? desc->log2_chroma_h : 0;
  }
  for (int p = 0; p < 4 && src.data[p]; ++p) {
    planes[p] = src.data[p] + ptrdiff_t(crop_y_ >> plane_shift_y[p]) * src.linesize[p] +
                ptrdiff_t(crop_x_ >> plane_shift_x[p]) * plane_step[p];
  }
  uint8_t* dst_planes[4] = {dst, nullptr, nullptr, nullptr};
  const int dst_stride[4] = {scaled_w_ * 3, 0, 0, 0};
  sws_scale(sws_.get(), planes, src.linesize, 0, crop_h_, dst_planes, dst_stride);
}

void FrameConverter::convert_then_crop(const AVFrame& src, uint8_t* dst) {
  uint8_t* tmp[4] = {scratch_.data(), nullptr, nullptr, nullptr};
  const int tmp_stride[4] = {scaled_w_ * 3, 0, 0, 0};
  sws_scale(sws_.get(), src.data, src.linesize, 0, src.height, tmp, tmp_stride);
  const int x0 = (scaled_w_ - image_dim_) / 2, y0 = (scaled_h_ - image_dim_) / 2;
  const size_t row = size_t(image_dim_) * 3;
  for (int y = 0; y < image_dim_; ++y)
    std::memcpy(dst + y * row, scratch_.data() + (size_t(y0 + y) * scaled_w_ + x0) * 3, row);
}

}  // namespace perceiver::detail
