public enum P2 {}
