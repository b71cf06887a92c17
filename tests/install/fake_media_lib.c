int pcv_fake_media_symbol(void) { return 17; }
