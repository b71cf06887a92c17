// What evaluation writes for a few reconstructed validation clips: a side-by-side MP4 with the
// reconstructed audio, a WAV and a PNG frame grid (libavcodec, libavformat, libsndfile). The
// core's evaluation (train/evaluation.h) calls it through the media hooks (register_media()).
#pragma once

#include <cstdint>
#include <filesystem>

namespace perceiver {

/// Writes, for one clip: <stem>.mp4 with the original (left) and the reconstruction (right) side
/// by side at `fps`, with the reconstructed audio track; <stem>.wav (the reconstructed audio);
/// <stem>_frames.png (a grid: originals in the top row, reconstructions below, up to 8 frames).
/// video/recon: f32 [T,H,W,3] in [0,1] (clamped); audio: f32 [S] mono at `sample_rate`.
void write_reconstruction_media(const std::filesystem::path& stem, const float* video, const float* recon_video,
                                const float* recon_audio, int64_t frames, int64_t height, int64_t width,
                                int64_t audio_samples, double fps, int sample_rate);

}  // namespace perceiver
