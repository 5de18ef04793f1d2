/// audiod's version: the one place it is written. `audiod --version`, `audioctl --version` and the `Version`
/// property on the bus all read it.
public enum Release {
    public static let version = "0.4.0"
}
