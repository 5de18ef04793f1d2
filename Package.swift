// swift-tools-version:6.1
import PackageDescription

// Layering (STYLE.md §1): AudioPolicy is the pure engine and depends on nothing but the standard library.
// Everything that does I/O sits on top of it.
let package = Package(
    name: "audiod",
    products: [
        .library(name: "AudioPolicy", targets: ["AudioPolicy"]),
    ],
    dependencies: [
        .package(url: "https://github.com/x-sheep/swift-property-based.git", from: "2.0.0"),
    ],
    targets: [
        .target(
            name: "AudioPolicy",
            swiftSettings: [.swiftLanguageMode(.v6)]
        ),
        .executableTarget(
            name: "AudioPolicyBenchmarks",
            dependencies: ["AudioPolicy"],
            swiftSettings: [.swiftLanguageMode(.v6)]
        ),
        .testTarget(
            name: "AudioPolicyTests",
            dependencies: [
                "AudioPolicy",
                .product(name: "PropertyBased", package: "swift-property-based"),
            ],
            swiftSettings: [.swiftLanguageMode(.v6)]
        ),
    ]
)
