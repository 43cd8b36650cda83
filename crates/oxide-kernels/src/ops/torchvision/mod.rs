//! torchvision's operators (`torchvision::nms`, `roi_align`, `roi_pool`,
//! `ps_roi_align`, `ps_roi_pool`, `deform_conv2d` and their backwards), restated
//! from torchvision's CPU kernels so that oxide matches them. The glue registers
//! them for the `torchvision` namespace (`csrc/torchvision/`); they are live only
//! when torchvision defines the operators.

pub mod deform_conv;
pub mod nms;
pub mod roi;
